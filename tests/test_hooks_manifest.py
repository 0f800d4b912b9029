"""The SSH hooks render a job as the store keeps it (a validated manifest), with the machine's facts."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from orchestrator.engine.jobspec import jobspec_from_manifest
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.from_manifest import render_input_for
from orchestrator.runtime.node_facts import NodeSettings, launch_facts
from orchestrator.runtime.render import render_script
from orchestrator.runtime.render_input import CloudKind, ResumeVia
from providers.base import Market, Offer
from providers.fabric import Fabric
from providers.gpus import Interconnect

DOC = {"apiVersion": "orch/v1", "kind": "Job", "name": "tiny",
       "resources": {"gpu": "A100-80G", "count": 4},
       "run": {"launcher": "torchrun", "script": "train.py", "args": ["--steps", 10]},
       "checkpoint": {"path": "/ckpt", "store": "s3://bucket/tiny", "resume": {"env": "RESUME_FROM"},
                      "notify": {"signal": "SIGUSR1"}},
       "secrets": ["HF_TOKEN"]}


def test_a_stored_manifest_renders_with_the_offer_and_machine_facts() -> None:
    m = Manifest.model_validate(DOC)
    now = datetime.now(UTC)
    job = JobRecord(id=1, name="tiny", manifest=m, spec=jobspec_from_manifest(m, now), status=JobStatus.LAUNCHING,
                    desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)
    offer = Offer("aws", "p4de.24xlarge", "us-east-1", "use1-az1", "A100-80G", 8, 80, 96, 1152,
                  Interconnect.NVLINK, Market.SPOT, 12.0, date(2025, 12, 1))
    attempt = AttemptRecord(7, 1, "labcdefabcdef", AttemptState.LAUNCHED, offer, "us-east-1/i-1")
    ri = render_input_for(job.manifest, launch_facts(job, attempt, NodeSettings(
        store_endpoint="http://127.0.0.1:9000", aws_metadata_url="http://127.0.0.1:8111")))
    assert ri.gpus_per_node == 8 and ri.interconnect is Interconnect.NVLINK   # the machine's, not the manifest's 4
    assert ri.agent.cloud is CloudKind.AWS and ri.agent.aws_metadata_url == "http://127.0.0.1:8111"
    assert ri.checkpoint is not None and ri.checkpoint.store_endpoint == "http://127.0.0.1:9000"
    assert ri.checkpoint.resume_via is ResumeVia.ENV and ri.checkpoint.resume_name == "RESUME_FROM"
    assert ri.secrets == ("HF_TOKEN",) and ("ORCH_LAUNCH_ID", "labcdefabcdef") in ri.env


def _job_and_attempt(doc: dict, provider: str = "aws"):  # type: ignore[no-untyped-def,type-arg]
    m = Manifest.model_validate(doc)
    now = datetime.now(UTC)
    job = JobRecord(id=1, name="tiny", manifest=m, spec=jobspec_from_manifest(m, now), status=JobStatus.LAUNCHING,
                    desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)
    offer = Offer(provider, "p4de.24xlarge", "us-east-1", "use1-az1", "A100-80G", 8, 80, 96, 1152,
                  Interconnect.NVLINK, Market.SPOT, 12.0, date(2025, 12, 1))
    return job, AttemptRecord(7, 1, "labcdefabcdef", AttemptState.PLANNED, offer)


def test_build_service_boots_cloud_jobs_and_keeps_ssh_as_the_second_channel(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import time

    from orchestrator.config.file import OrchConfig
    from orchestrator.daemon.assembly import build_service
    from orchestrator.runtime.engine_hooks import SshBootstrapper
    from orchestrator.runtime.ssh_monitor import SshMonitor
    from orchestrator.runtime.store_monitor import CombinedMonitor, RoutingBootstrapper, StoreMonitor
    from tests.fakes.scoped_store import ScopedStore

    monkeypatch.setenv("HF_TOKEN", "hf-value")
    # The store's keys a node's scoped credential is cut from, and the token service that cuts it (a fake).
    sts = ScopedStore(time.time).start()
    for name, value in sts.daemon_env().items():
        monkeypatch.setenv(name, value)
    url = f"sqlite:///{tmp_path / 'orch.db'}"
    with_store = _job_and_attempt(DOC)
    no_store = _job_and_attempt({k: v for k, v in DOC.items() if k != "checkpoint"})
    plain = build_service(config=OrchConfig(owner="o"), store_url=url, providers={}, catalog=[])
    hooks = plain.reconciler.hooks
    assert isinstance(hooks.monitor, CombinedMonitor) and isinstance(hooks.monitor.first, StoreMonitor)
    assert hooks.monitor.second is None and isinstance(hooks.bootstrapper, RoutingBootstrapper)
    # Without an SSH key every cloud machine boots its job, with a store to report to or not.
    assert hooks.startup.render(*with_store).startswith("#!/bin/sh\n")
    assert hooks.startup.render(*no_store).startswith("#!/bin/sh\n")
    plain.close()
    monkeypatch.setenv("ORCH_SSH_PRIVATE_KEY", str(tmp_path / "id_ed25519"))
    wired = build_service(config=OrchConfig(owner="o"), store_url=url, providers={}, catalog=[])
    hooks = wired.reconciler.hooks
    assert isinstance(hooks.monitor, CombinedMonitor) and isinstance(hooks.monitor.second, SshMonitor)
    assert isinstance(hooks.bootstrapper, RoutingBootstrapper) and isinstance(hooks.bootstrapper.ssh, SshBootstrapper)
    # With a key: a job with a store still boots itself (no SSH); one without is started over SSH, never twice.
    assert hooks.startup.render(*with_store).startswith("#!/bin/sh\n")
    assert hooks.startup.render(*no_store) == ""
    assert hooks.startup.render(*_job_and_attempt(DOC, provider="ssh")) == ""
    wired.close()
    sts.stop()


def _multi_node_input(infiniband: bool | None, fabric: Fabric | None, nodes: int = 2):  # type: ignore[no-untyped-def]
    doc = {**DOC, "resources": {"gpu": "A100-80G", "count": 8, "nodes": nodes,
                                **({} if infiniband is None else {"infiniband": infiniband})}}
    m = Manifest.model_validate(doc)
    now = datetime.now(UTC)
    job = JobRecord(id=1, name="tiny", manifest=m, spec=jobspec_from_manifest(m, now), status=JobStatus.LAUNCHING,
                    desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)
    offer = Offer("ssh", "rack1", "lab", None, "A100-80G", 8, 80, 96, 1152, Interconnect.NVLINK, Market.ON_DEMAND,
                  0.0, date(2025, 12, 1))
    attempt = AttemptRecord(7, 1, "labcdefabcdef", AttemptState.LAUNCHED, offer, "rack1")
    return render_input_for(job.manifest, launch_facts(job, attempt, fabric=fabric))   # the instance's fabric


@pytest.mark.parametrize(("infiniband", "fabric", "ib_on"), [
    (None, None, False),                      # nothing known: NCCL stays on sockets (NCCL_IB_DISABLE=1)
    (None, Fabric.INFINIBAND, True),          # the machine, as launched, is on an InfiniBand fabric
    (None, Fabric.ROCE, True),                # RoCE is NCCL's IB transport too
    (None, Fabric.EFA, False),                # EFA goes through its plugin; IB verbs have nothing to use
    (True, None, True),                       # the manifest says so
    (False, Fabric.INFINIBAND, False),        # the manifest says no
])
def test_nccl_uses_infiniband_only_where_the_job_or_the_machine_has_it(infiniband: bool | None,
                                                                     fabric: Fabric | None, ib_on: bool) -> None:
    ri = _multi_node_input(infiniband, fabric)
    assert ri.infiniband is ib_on
    script = render_script(ri)
    assert ("export NCCL_IB_DISABLE=1" in script) is (not ib_on)
    assert ("over InfiniBand" in script) is ib_on


def test_a_single_node_job_renders_no_nccl_network_settings() -> None:
    script = render_script(_multi_node_input(None, None, nodes=1))
    assert "NCCL_IB_DISABLE" not in script and "NCCL_SOCKET_IFNAME" not in script
