"""A dead SSH host is a lost node: your own machine A (a REAL sshd on 127.0.0.1) runs the job and its agent
reports through the real SshMonitor; then A's sshd dies. The engine (fake clock) keeps A until
``heartbeat_timeout``, then releases it and recovers the job on machine B from A's last committed checkpoint.
No machine is left reserved but B. A host that dies before its agent ever reports is ended after
``boot_timeout`` the same way.

The agent is stood in for by its status file (docs/runtime.md), written on A's disk by the test: the
SshMonitor reads it over SSH exactly as it reads a real agent's (tests/e2e drive a real one).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, ServiceSettings, build_service
from orchestrator.engine.hooks import NoBootstrap
from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.runtime.ssh_monitor import SshMonitor
from orchestrator.runtime.transport_pool import TransportPool
from orchestrator.store import open_store, repo
from orchestrator.store.sqlstore import SqlEngineStore
from providers.base import GpuRequest
from providers.ssh.adapter import SshProvider
from tests.e2e.conftest import GPU, host_settings, ssh_settings
from tests.support.clock import ManualClock as Clock
from tests.support.sshd import FakeGpu, Sshd, require_sshd

OWNER = "alice"
JOB = "tiny"
WORK = Path(".orch") / "jobs" / JOB
HEARTBEAT = timedelta(minutes=2)
BOOT = timedelta(minutes=5)
TICK = timedelta(seconds=30)
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
MANIFEST = {
    "apiVersion": "orch/v1", "kind": "Job", "name": JOB, "resources": {"gpu": GPU, "count": 2},
    "run": {"launcher": "command", "command": "python train.py"},
    "checkpoint": {"path": "ckpt", "store": "s3://bucket/tiny"},
    "policies": {"estimated_hours": 1},
}




def write_status(machine: Sshd, heartbeat: float, step: int) -> None:
    """The agent's status file (format: orchestrator/runtime/status.py) with one committed checkpoint."""
    doc = {
        "version": 1, "job_name": JOB, "node_rank": 0,
        "agent": {"pid": 1, "started_at": 1000.0, "heartbeat": heartbeat},
        "job": {"state": "running", "pid": 2, "exit_code": None, "started_at": 1000.0, "ended_at": None},
        "gpu": {"available": True, "error": None, "samples": [],
                "summary": {"samples": 0, "gpus": 2, "window_s": 0, "mean_util": None, "max_util": None,
                            "last_mean_util": None, "max_mem_used_mib": None}},
        "notices": [], "checkpoint_requests": [],
        "checkpoints": [{"name": f"step-{step}", "step": step, "uri": f"s3://bucket/tiny/step-{step}",
                         "committed_at": heartbeat}],
        "latest": f"step-{step}", "errors": [],
    }
    path = machine.workdir / WORK / "status.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[tuple[Sshd, Sshd]]:
    require_sshd()
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(Sshd(tmp_path / "machine-a", gpus=(FakeGpu(0), FakeGpu(1))))
        b = stack.enter_context(Sshd(tmp_path / "machine-b", gpus=(FakeGpu(0), FakeGpu(1))))
        yield a, b


def engine(tmp_path: Path, a: Sshd, b: Sshd, clock: Clock) -> tuple[Service, SshProvider, TransportPool]:
    hosts = (host_settings("host-a", a, 0.40, "site-a"), host_settings("host-b", b, 0.90, "site-b"))
    # A dead host refuses at once; the transport's reconnect backoff (tests/test_ssh_transport.py, on a fake clock)
    # only met that refusal again for a real second on each of the ten ticks A is waited for.
    provider = SshProvider(ssh_settings(hosts, a, tmp_path).model_copy(update={"reconnect_deadline_s": 0.0}))
    catalog = provider.offers(GpuRequest(gpus=(GPU,), count=2))
    pool = TransportPool({"ssh": provider})
    store = SqlEngineStore(open_store(f"sqlite:///{tmp_path / 'orch.db'}"), OWNER, catalog=catalog)
    service = build_service(config=OrchConfig(owner=OWNER), engine_store=store, providers={"ssh": provider},
                            catalog=catalog, clock=clock, monitor=SshMonitor(pool), bootstrapper=NoBootstrap(),
                            settings=ServiceSettings(heartbeat_timeout=HEARTBEAT, boot_timeout=BOOT))
    return service, provider, pool


def test_a_dead_ssh_host_is_lost_after_the_heartbeat_timeout_and_the_job_recovers_on_b(
        machines: tuple[Sshd, Sshd], tmp_path: Path) -> None:
    a, b = machines
    clock = Clock()
    service, provider, pool = engine(tmp_path, a, b, clock)
    store = service.engine_store
    assert isinstance(store, SqlEngineStore)
    try:
        from orchestrator.manifest.schema import Manifest

        with store.store.transaction() as tx:
            repo.apply_jobs(tx, [repo.AppliedJob(Manifest.model_validate(MANIFEST), "h-tiny")], now=T0)
        [job] = store.active_jobs()
        beat = 1000.0
        for _ in range(6):                       # A runs the job; its agent reports and commits step 5
            clock.now += TICK
            beat += 30
            write_status(a, beat, 5)
            service.reconciler.tick()
        [first] = store.attempts_for_job(job.id)
        assert (first.instance_id, first.state) == ("host-a", AttemptState.RUNNING)
        assert store.last_checkpoint(job.id) == "s3://bucket/tiny/step-5"   # read over SSH from A's agent

        a.stop()                                 # the host dies: its sshd answers no more
        for _ in range(int(HEARTBEAT / TICK) - 1):
            clock.now += TICK
            service.reconciler.tick()
        assert [x.state for x in store.attempts_for_job(job.id)] == [AttemptState.RUNNING]

        clock.now += TICK
        service.reconciler.tick()
        lost, second = store.attempts_for_job(job.id)
        assert (lost.state, lost.end_cause) == (AttemptState.FAILED, EndCause.SILENT)
        assert (second.instance_id, second.checkpoint_restored) == ("host-b", "s3://bucket/tiny/step-5")
        # A cannot be reached to stop what may still run there: it is NOT freed for the next job but kept,
        # marked unusable (providers/ssh/cleanup.py); B is the job's one live attempt.
        held = {i.instance_id: i for i in provider.list_instances(OWNER)}
        assert sorted(held) == ["host-a", "host-b"] and held["host-a"].raw_state == "unusable"
        assert held["host-b"].raw_state == "reserved"
    finally:
        pool.close()
        service.close()


def test_a_host_that_dies_before_its_agent_reports_is_ended_after_boot_timeout(
        machines: tuple[Sshd, Sshd], tmp_path: Path) -> None:
    a, b = machines
    clock = Clock()
    service, provider, pool = engine(tmp_path, a, b, clock)
    store = service.engine_store
    assert isinstance(store, SqlEngineStore)
    try:
        from orchestrator.manifest.schema import Manifest

        with store.store.transaction() as tx:
            repo.apply_jobs(tx, [repo.AppliedJob(Manifest.model_validate(MANIFEST), "h-tiny")], now=T0)
        [job] = store.active_jobs()
        service.reconciler.tick()                # A reserved (its verify ran over SSH), then it dies
        a.stop()
        for _ in range(int(BOOT / TICK) - 1):
            clock.now += TICK
            service.reconciler.tick()
        assert [x.instance_id for x in store.attempts_for_job(job.id)] == ["host-a"]
        clock.now += TICK
        service.reconciler.tick()
        ended, second = store.attempts_for_job(job.id)
        assert (ended.state, ended.end_cause) == (AttemptState.FAILED, EndCause.BOOT_TIMEOUT)
        assert second.instance_id == "host-b" and second.checkpoint_restored is None
        # The dead host A is kept out (unusable: it could not be cleaned), never handed to another job.
        held = {i.instance_id: i for i in provider.list_instances(OWNER)}
        assert sorted(held) == ["host-a", "host-b"] and held["host-a"].raw_state == "unusable"
    finally:
        pool.close()
        service.close()
