"""End to end without SSH: fake clouds boot their nodes, the nodes report through the store.

A launch on AWS (moto) boots its node: the fake cloud runs the machine's user data (orch's boot script, read
back through EC2's DescribeInstanceAttribute) as a local process in its own directory; the boot script
installs the agent, the agent starts the tiny DDP job and reports status, GPU utilization, checkpoints and
its logs to the job's S3 store (moto). A spot notice from the fake metadata service reaches the engine
through the store; orch relaunches on GCP (the GCE fake, whose startup-script metadata boots the second
node), which restores the notice checkpoint and finishes with the weights of an uninterrupted run. No SSH
connection is opened anywhere on this path (paramiko's connect raises). Everything is driven by events (the
engine's ticks and what the store says), never by timers; the deadlines below only bound a hung run.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, ServiceSettings, build_service
from orchestrator.engine.ports import AttemptRecord
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.runtime.node_facts import NodeSettings
from orchestrator.runtime.node_state import STATUS_OBJECT
from orchestrator.store import open_store
from providers.base import Market
from tests.e2e.booting import NodeBooter, aws_user_data, gce_user_data
from tests.e2e.conftest import (
    SECRET_VALUE,
    STEPS,
    Bucket,
    code_repo,
    move_repo_on,
    poll_until,
    require_tools,
)
from tests.fakes.metadata import MetadataState, metadata_server
from tests.support.sshd import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

OWNER = "e2e"
JOB = "tiny"
#: The engine's tick cadence when nothing was written to the store (``Clouds.tick_until``); news ticks at once.
IDLE_TICK_S = 2.0

MANIFEST = f"""\
apiVersion: orch/v1
kind: Job
name: {JOB}
resources: {{gpu: [A10G-24G, L4-24G], count: 2}}
run:
  launcher: torchrun
  script: train_tiny.py
  args: ["--steps", "{STEPS}", "--seed", "1234", "--ckpt-every", "5", "--hold-at-step", "8", "--hang-at-step", "9"]
env: {{OMP_NUM_THREADS: "1"}}
checkpoint:
  path: ckpt
  store: {{store}}
  resume: {{arg: --resume-from}}
  notify: {{file: ckpt/CHECKPOINT_NOW}}
policies:
  estimated_hours: 1
  preempted_zone_cooldown: 30m
"""


@dataclass
class Clouds:
    service: Service
    booter: NodeBooter
    metadata: MetadataState
    aws: Any
    gcp: Any
    ssh_attempts: list[str]
    written: threading.Event

    def tick_until(self, cond: Callable[[], Any], what: str, deadline_s: float = 120.0) -> Any:
        """One engine tick, then the clouds boot or kill what changed, until ``cond`` holds. The next tick comes
        when something was written to the store (moto, in this process: a node's report, a checkpoint, LATEST, or
        what a tick itself wrote, such as a node's go) or the test ``poke``d it, else ``IDLE_TICK_S`` after the
        last: every step of this path reaches the engine through the store, so it ticks when there is news."""
        def step() -> Any:
            self.written.clear()    # a write during this tick makes the next one due at once
            report = self.service.reconciler.tick()
            assert not report.errors, report.errors
            self.booter.sync()
            if value := cond():
                return value
            self.written.wait(IDLE_TICK_S)
            return None
        return poll_until(step, what, deadline_s, interval_s=0.0)

    def poke(self) -> None:
        """Make the next tick due at once (the test changed a cloud: nothing is written to the store for it)."""
        self.written.set()

    def attempts(self, job_id: int) -> list[AttemptRecord]:
        return list(self.service.engine_store.attempts_for_job(job_id))

    def running_on(self, job_id: int, provider: str) -> AttemptRecord | None:
        return next((a for a in self.attempts(job_id)
                     if a.offer.provider == provider and a.state is AttemptState.RUNNING), None)


@pytest.fixture
def clouds(tmp_path: Path, bucket: Bucket, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clouds]:
    require_tools()
    import paramiko

    from tests.contract import harness_aws, harness_gcp
    from tests.contract.harness_aws import AwsHarness
    from tests.contract.harness_gcp import GcpHarness

    ssh_attempts: list[str] = []

    def no_ssh(self: object, hostname: str, *args: Any, **kw: Any) -> None:
        ssh_attempts.append(hostname)
        raise AssertionError(f"an SSH connection to {hostname} was opened on the no-SSH path")

    monkeypatch.setattr(paramiko.SSHClient, "connect", no_ssh)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    # The nodes' store credential is an STS session cut from the daemon's keys (moto's STS on the store's
    # endpoint; moto does not apply the session policy: tests/test_node_credentials.py checks the scope).
    monkeypatch.setenv("ORCH_STS_ENDPOINT", s3_endpoint)
    with contextlib.ExitStack() as stack:
        aws_h, gcp_h = AwsHarness(), GcpHarness()
        stack.callback(aws_h.close)
        stack.callback(gcp_h.close)
        url, metadata = stack.enter_context(metadata_server())
        # A 2-GPU stand-in for the AWS spot machine (moto runs any type; DDP then has world size 2 on both
        # clouds, like the reference run); the GCP offer is really 2x L4, on demand.
        aws_spot = replace(harness_aws.catalog_offer(Market.SPOT, "g5.xlarge"), gpu_count=2, price_hr=0.5)
        gcp_on_demand = harness_gcp.catalog_offer(Market.ON_DEMAND, "g2-standard-24")
        catalog = [aws_spot, gcp_on_demand]
        providers = {"aws": aws_h.provider(), "gcp": gcp_h.provider()}
        # Fast agent loops; the report heartbeat keeps its default (10 s): a node reports at once when what the
        # engine acts on changes, and each report wakes the engine's next tick (``Clouds.tick_until``).
        fast = {"store_endpoint": s3_endpoint, "sample_interval_s": 0.5, "notice_interval_s": 0.5}
        nodes = {"aws": NodeSettings(aws_metadata_url=url, master_port=free_port(), **fast),  # type: ignore[arg-type]
                 "gcp": NodeSettings(gcp_metadata_url=url, master_port=free_port(), **fast)}  # type: ignore[arg-type]
        service = build_service(config=OrchConfig(owner=OWNER), store=open_store(f"sqlite:///{tmp_path / 'orch.db'}"),
                                providers=providers, catalog=catalog, lease_owner=None, node_settings=nodes,
                                settings=ServiceSettings(notice_drain=timedelta(minutes=10)))
        stack.callback(service.close)
        booter = NodeBooter(tmp_path / "nodes", providers, OWNER,
                            {"aws": aws_user_data(aws_h.fake.endpoint_url, "us-east-1"),
                             "gcp": gce_user_data(gcp_h.fake)},
                            gpu_util={"aws": (87, 93), "gcp": (61, 64)})
        stack.callback(booter.close)
        yield Clouds(service, booter, metadata, aws_h, gcp_h, ssh_attempts, _store_writes(monkeypatch))


def _store_writes(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set by every object written to moto's S3 (served in this process) while the test runs."""
    from moto.s3.models import S3Backend

    written = threading.Event()
    put = S3Backend.put_object

    def put_object(self: S3Backend, *args: Any, **kw: Any) -> Any:
        try:
            return put(self, *args, **kw)
        finally:
            written.set()

    monkeypatch.setattr(S3Backend, "put_object", put_object)
    return written


def _apply(clouds: Clouds, bucket: Bucket, where: Path) -> int:
    """``orch apply`` from the user's repository (``where``): the nodes get train_tiny.py from its code pack."""
    from orchestrator.app import jobs as app_jobs

    path = where / f"{JOB}.yaml"
    path.write_text(MANIFEST.replace("{store}", bucket.uri))
    assert clouds.service.store is not None
    app_jobs.apply(clouds.service.store, app_jobs.load([path]))
    [job] = [j for j in clouds.service.engine_store.active_jobs() if j.name == JOB]
    return job.id


def _status(bucket: Bucket, launch_id: str) -> dict[str, Any] | None:
    try:
        body = bucket.client.get_object(Bucket=bucket.name, Key=f"{bucket.prefix}/_orch/{launch_id}/{STATUS_OBJECT}")
    except bucket.client.exceptions.NoSuchKey:
        return None
    return json.loads(body["Body"].read())


def _steps(node_root: Path) -> list[int]:
    log = node_root / ".orch" / "jobs" / JOB / "steps.log"
    if not log.exists():
        return []
    return [int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("step ")]


def test_aws_node_boots_reports_through_s3_and_resumes_on_gcp_without_ssh(
        clouds: Clouds, bucket: Bucket, tmp_path: Path, reference_weights: Mapping[str, Any],
        caplog: pytest.LogCaptureFixture, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level("DEBUG", logger="orch")
    repo = code_repo(tmp_path)
    job_id = _apply(clouds, bucket, repo)

    # Launch -> the node boots itself -> its agent reports the job running through S3 -> the engine says RUNNING.
    clouds.tick_until(lambda: clouds.attempts(job_id), "the launch on AWS")
    launched = time.monotonic()
    a = clouds.tick_until(lambda: clouds.running_on(job_id, "aws"), "the job to run on AWS (reported via S3)")
    launch_to_running = time.monotonic() - launched
    [node_a] = [n for k, n in clouds.booter.nodes.items() if k.startswith("aws/")]
    assert node_a.boot_exit == 0, (node_a.root / "boot.log").read_text()
    clouds.tick_until(lambda: clouds.service.engine_store.last_checkpoint(job_id), "a checkpoint reported via S3")
    # GPU utilization from the node's nvidia-smi reached the engine through the store.
    clouds.tick_until(lambda: (87.0, 93.0) in [s.gpu_util_pct for s in clouds.service.reconciler.utilization(a.id)],
                      "A's GPU utilization via S3")

    # The code came through the store: orch put the pinned pack there once, the booted node fetched and unpacked it.
    pin = clouds.service.engine_store.job(job_id).manifest.code.pin
    assert pin is not None
    packs = [o["Key"] for o in bucket.client.list_objects_v2(Bucket=bucket.name,
                                                             Prefix=f"{bucket.prefix}/_orch/code/")["Contents"]]
    assert packs == [f"{bucket.prefix}/_orch/code/code-{pin.sha256}.tar.gz"]
    assert (node_a.root / ".orch" / "jobs" / JOB / ".orch-code").read_text().strip() == pin.sha256
    move_repo_on(repo)        # the relaunch on GCP must still run the applied commit

    # The notice: the agent hears it, checkpoints now, drains; the engine learns it from the store.
    clouds.metadata.raise_aws_spot()
    noticed = time.monotonic()

    def a_drained() -> bool:
        status = _status(bucket, a.launch_id)
        return bool(status and status["job"].get("drained") and status["job"]["state"] == "exited"
                    and status["pending_uploads"] == 0)

    def reclaim_when_drained() -> AttemptRecord | None:
        # The cloud reclaims A once its agent says the job stopped and the notice checkpoint is up (an event,
        # standing in for the end of the real notice window).
        if a_drained() and not clouds.booter.killed:
            clouds.aws.preempt(a.instance_id)
            clouds.poke()
        return clouds.running_on(job_id, "gcp")

    b = clouds.tick_until(reclaim_when_drained, "the replacement to run on GCP")
    notice_to_running = time.monotonic() - noticed
    a_steps = _steps(node_a.root)

    clouds.tick_until(lambda: clouds.service.engine_store.job(job_id).status is JobStatus.SUCCEEDED,
                      "the job to succeed on GCP", deadline_s=180.0)
    clouds.tick_until(lambda: all(n in clouds.booter.killed for n in clouds.booter.nodes), "both machines gone")
    [node_b] = [n for k, n in clouds.booter.nodes.items() if k.startswith("gcp/")]
    assert (node_b.root / ".orch" / "jobs" / JOB / "VERSION").read_text() == "1\n"   # the applied commit
    b_steps = _steps(node_b.root)
    job_log_b = (node_b.root / ".orch" / "jobs" / JOB / "job.log").read_text()
    restored = int(job_log_b.split("resuming from ckpt/step-", 1)[1].split()[0])
    # B waited for A's notice checkpoint (planned with the last one the store knew, it restored the newer LATEST).
    assert clouds.service.engine_store.last_checkpoint(job_id) == f"{bucket.uri}/step-{STEPS}"
    # B resumed from the notice checkpoint A committed, and ran every later step once.
    assert restored == 8 and b_steps == list(range(restored + 1, STEPS + 1)), (restored, b_steps[:3])
    assert bucket.latest() == f"step-{STEPS}"
    import torch

    weights = torch.load(node_b.root / ".orch" / "jobs" / JOB / "final.pt", weights_only=True)
    assert weights.keys() == reference_weights.keys()
    assert all(torch.equal(weights[k], reference_weights[k]) for k in reference_weights)
    # What the engine recorded came from the store: A's notice, both machines' GPU numbers, B's exit.
    history = clouds.attempts(job_id)
    assert [(x.offer.provider, x.state) for x in history] == [("aws", AttemptState.PREEMPTED),
                                                             ("gcp", AttemptState.SUCCEEDED)]
    assert history[0].reason and history[0].reason.startswith("notice: aws spot-interruption")
    assert (61.0, 64.0) in [s.gpu_util_pct for s in clouds.service.reconciler.utilization(b.id)]
    # The job's output outlives both machines: each node's log is in the store.
    logs_b = b"".join(bucket.client.get_object(Bucket=bucket.name, Key=o["Key"])["Body"].read()
                      for o in bucket.client.list_objects_v2(
                          Bucket=bucket.name, Prefix=f"{bucket.prefix}/_orch/{b.launch_id}/logs/")["Contents"])
    assert f"resuming from ckpt/step-{restored}".encode() in logs_b
    # ... and `orch logs` reads it from there, both machines gone.
    from typer.testing import CliRunner

    from orchestrator.cli.main import app
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")
    monkeypatch.setenv("ORCH_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("ORCH_STORE_ENDPOINT", s3_endpoint)
    shown = CliRunner().invoke(app, ["logs", JOB])
    assert shown.exit_code == 0 and shown.stdout.encode() == logs_b.decode("utf-8", "replace").encode()
    # No machine left, no SSH connection, and the store credentials went nowhere but the user data.
    assert [i for p in (clouds.aws.provider(), clouds.gcp.provider()) for i in p.list_instances(OWNER)
            if not i.state.is_gone] == []
    assert clouds.ssh_attempts == []
    _assert_secret_kept(tmp_path, bucket, caplog, clouds)
    lost = max(a_steps) - restored
    figures = (f"launch -> job running (no SSH): {launch_to_running:.1f}s; notice -> replacement running on GCP: "
               f"{notice_to_running:.1f}s; restored step-{restored}; A reached step {max(a_steps)}; steps lost: {lost}")
    print(f"\n[e2e boot, no SSH] {figures}")
    (tmp_path / "figures.txt").write_text(figures + "\n")


def _assert_secret_kept(tmp_path: Path, bucket: Bucket, caplog: pytest.LogCaptureFixture, clouds: Clouds) -> None:
    """The daemon's store key (also a job secret here) is in no log, event or database row, in no file on the
    nodes (not even the user data the cloud was given: the node holds a session credential, and the job's secrets
    came through the store into memory) and in no object left in the store."""
    assert SECRET_VALUE not in caplog.text
    assert SECRET_VALUE.encode() not in (tmp_path / "orch.db").read_bytes()
    with clouds.service.store.transaction() as tx:  # type: ignore[union-attr]
        from sqlmodel import select

        from orchestrator.store.models import Event
        assert not [e for e in tx.exec(select(Event)) if SECRET_VALUE in f"{e.message} {e.data}"]
    holders = [p.relative_to(tmp_path) for p in (tmp_path / "nodes").rglob("*")
               if p.is_file() and SECRET_VALUE.encode() in p.read_bytes()]
    assert holders == [], holders
    for obj in bucket.client.list_objects_v2(Bucket=bucket.name, Prefix=bucket.prefix).get("Contents", []):
        assert SECRET_VALUE.encode() not in bucket.client.get_object(Bucket=bucket.name, Key=obj["Key"])["Body"].read()
