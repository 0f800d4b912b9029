"""A two-node job end to end: the engine launches a gang on two real SSH "machines" of one site, node 1
joins node 0's rendezvous (torchrun --nnodes 2, gloo), both nodes upload their part of every checkpoint;
a spot notice on NODE 1 makes the whole job checkpoint now, the site is reclaimed, and orch restarts the
gang on the other site's two machines, which restore LATEST and finish with an uninterrupted run's weights.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.reconciler import Reconciler
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.runtime.render_input import CloudKind
from orchestrator.store.sqlstore import SqlEngineStore
from providers.base import GpuRequest, Market
from tests.e2e.conftest import (
    GPU,
    OWNER,
    STEPS,
    WORK,
    Bucket,
    RecordingMonitor,
    SpotSshProvider,
    add_job,
    code_repo,
    git,
    host_settings,
    job_manifest,
    kill_machine,
    move_repo_on,
    node_settings,
    poll_until,
    require_tools,
    ssh_engine,
    ssh_settings,
    steps_logged,
    torch_on_path,
)
from tests.fakes.metadata import MetadataState, metadata_server
from tests.support.sshd import FakeGpu, Sshd, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

HOSTS = {"a0": ("site-a", 0.40), "a1": ("site-a", 0.41), "b0": ("site-b", 0.90), "b1": ("site-b", 0.91)}


@dataclass
class GangWorld:
    machines: dict[str, Sshd]
    metadata: MetadataState
    provider: SpotSshProvider
    store: SqlEngineStore
    monitor: RecordingMonitor
    rec: Reconciler
    ports: dict[str, int]

    def tick_until(self, cond: Any, what: str, deadline_s: float = 60.0) -> Any:
        def step() -> Any:
            report = self.rec.tick()
            assert not [e for e in report.errors if "bootstrap" in e], report.errors
            return cond()
        return poll_until(step, what, deadline_s, interval_s=0.2)

    def running(self, job: JobRecord) -> dict[str, AttemptRecord]:
        return {a.instance_id or "": a for a in self.store.attempts_for_job(job.id) if a.state is AttemptState.RUNNING}


@pytest.fixture
def gang_world(tmp_path: Path, s3_endpoint: str) -> Iterator[GangWorld]:
    require_tools()
    with contextlib.ExitStack() as stack:
        machines = {}
        for i, name in enumerate(HOSTS):
            m = stack.enter_context(Sshd(tmp_path / f"machine-{name}", gpus=(FakeGpu(0, utilization=70 + i),)))
            torch_on_path(m)
            stack.callback(kill_machine, m)
            machines[name] = m
        url, metadata = stack.enter_context(metadata_server())
        settings = ssh_settings(tuple(host_settings(f"host-{n}", m, HOSTS[n][1], HOSTS[n][0], gpus=1)
                                      for n, m in machines.items()), machines["a0"], tmp_path)
        provider = SpotSshProvider(settings, spot_hosts=frozenset({"host-a0", "host-a1"}))
        catalog = provider.offers(GpuRequest(gpus=(GPU,), count=1))
        assert sorted((o.instance_type, o.market) for o in catalog) == [
            ("host-a0", Market.SPOT), ("host-a1", Market.SPOT), ("host-b0", Market.ON_DEMAND),
            ("host-b1", Market.ON_DEMAND)]
        # One loopback for every "machine": each node 0 needs its own rendezvous port. Only node 1 of site A
        # is an AWS spot stand-in whose metadata server can raise a notice.
        ports = {n: free_port() for n in machines}
        nodes = {f"ssh/host-{n}": node_settings(s3_endpoint, master_port=ports[n], socket_ifname="lo")
                 for n in machines}
        nodes["ssh/host-a1"] = node_settings(s3_endpoint, cloud=CloudKind.AWS, aws_metadata_url=url,
                                             master_port=ports["a1"], socket_ifname="lo")
        store, _pool, monitor, rec = ssh_engine(stack, tmp_path, provider, catalog, nodes)
        yield GangWorld(machines, metadata, provider, store, monitor, rec, ports)


def test_two_node_gang_survives_a_notice_on_node_1_and_resumes_on_the_other_site(
        gang_world: GangWorld, bucket: Bucket, tmp_path: Path, reference_weights: Mapping[str, Any]) -> None:
    w = gang_world
    # Two nodes of one GPU each: the same world of 2 ranks as the reference run. The job holds after step 8 until
    # asked to checkpoint now; site A's gang then trains on (a gang is not drained) and hangs after step 17 until
    # the site is reclaimed; B's gang, resuming, goes on.
    manifest = job_manifest(bucket, ["--hold-at-step", "8", "--hang-at-step", "17"],
                            resume="{arg: --resume-from}", notify="{signal: SIGUSR1}", nodes=2, gpus=1)
    repo = code_repo(tmp_path)
    job = add_job(w.store, manifest, repo)
    applied = git(repo, "rev-parse", "HEAD")
    w.tick_until(lambda: {"host-a0", "host-a1"} <= set(w.running(job)), "the gang to run on site A")
    running = w.running(job)
    assert (running["host-a0"].node_rank, running["host-a1"].node_rank) == (0, 1)
    assert running["host-a0"].generation == running["host-a1"].generation
    assert w.store.job(job.id).status is JobStatus.RUNNING
    # Node 1 joined node 0's rendezvous: node 0's address and port, world of 2 nodes.
    script_a1 = (w.machines["a1"].workdir / WORK / "startup.sh").read_text()
    rendezvous = f"--nnodes 2 --nproc-per-node 1 --node-rank {{}} --master-addr 127.0.0.1 --master-port {w.ports['a0']}"
    assert rendezvous.format(1) in script_a1
    assert rendezvous.format(0) in (w.machines["a0"].workdir / WORK / "startup.sh").read_text()
    w.tick_until(lambda: w.store.last_checkpoint(job.id), "a committed checkpoint from the gang", 60.0)
    # Every node of the gang unpacked the same pack, at the applied commit; the repository then moves on.
    pin = w.store.job(job.id).manifest.code.pin
    assert pin is not None and pin.commit == applied
    for name in ("a0", "a1"):
        assert (w.machines[name].workdir / WORK / ".orch-code").read_text().strip() == pin.sha256
    assert move_repo_on(repo) != applied

    # The notice reaches node 1 only; the job (both ranks) checkpoints at step 8 where it holds. The gang trains
    # on and commits later checkpoints in step order: LATEST may be past step-8 by the time it is read.
    w.metadata.raise_aws_spot()
    noticed = time.monotonic()
    poll_until(lambda: (bucket.latest_step() or 0) >= 8, "step-8 committed (both nodes' parts, then LATEST)", 30.0)
    keys = sorted(o["Key"].rsplit("/", 1)[1] for o in bucket.client.list_objects_v2(
        Bucket=bucket.name, Prefix=f"{bucket.prefix}/step-8/")["Contents"])
    assert {"model.pt", "optim.pt", "rng-rank0.pt", "rng-rank1.pt", "COMPLETE", "COMPLETE.node-0",
            "COMPLETE.node-1"} <= set(keys)
    # The notice window ends on an event, not a timer: the gang (not drained) has trained on to its hang after
    # step 17, where it stays until the site is reclaimed.
    poll_until(lambda: steps_logged(w.machines["a0"])[-1:] == [17], "site A's gang to train on to step 17", 60.0)
    # The site is reclaimed: both machines die (node 0 would lose its peer anyway).
    for name in ("a0", "a1"):
        kill_machine(w.machines[name])
        w.provider.reclaim(f"host-{name}")
    a_steps = steps_logged(w.machines["a0"])
    restored = bucket.latest_step()
    assert restored is not None and restored >= 8 and a_steps[-1] <= 17, (restored, a_steps[-1:])

    w.tick_until(lambda: {"host-b0", "host-b1"} <= set(w.running(job)), "the gang to run again on site B", 90.0)
    back = time.monotonic() - noticed
    running = w.running(job)
    assert (running["host-b0"].node_rank, running["host-b1"].node_rank) == (0, 1)
    first_gen = min(a.generation for a in w.store.attempts_for_job(job.id))
    assert running["host-b0"].generation == first_gen + 1
    w.tick_until(lambda: w.store.job(job.id).status is JobStatus.SUCCEEDED, "the job to succeed on site B", 120.0)
    for name in ("b0", "b1"):     # the relaunch unpacked the applied commit, not the repository's newer one
        assert (w.machines[name].workdir / WORK / "VERSION").read_text() == "1\n"
    b_steps = steps_logged(w.machines["b0"])
    assert b_steps == list(range(restored + 1, STEPS + 1)), b_steps[:5]
    assert f"resuming from ckpt/step-{restored}" in (w.machines["b0"].workdir / WORK / "job.log").read_text()
    import torch

    weights = torch.load(w.machines["b0"].workdir / WORK / "final.pt", weights_only=True)
    assert all(torch.equal(weights[k], reference_weights[k]) for k in reference_weights)
    assert w.provider.list_instances(OWNER) == []
    print(f"\n[e2e 2 nodes] notice on node 1 -> gang running on site B: {back:.1f}s; restored step-{restored}; "
          f"site A reached step {a_steps[-1]}; steps lost: {a_steps[-1] - restored}")
