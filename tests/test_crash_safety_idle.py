"""Crash safety, idle's stop: a daemon killed between idle's stop being written, the cloud's stop call and the
write of its end, as a REAL subprocess SIGKILLed by itself (ORCH_CRASHPOINT) and in process; the restart
finishes the stop and leaves no attempt RUNNING on a stopped machine. Run with -s for the matrix.
"""

from __future__ import annotations

import json
import signal
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.store import open_store, repo
from tests.crash_world import (
    MatrixRow,
    Orch,
    drive,
    make_orch,
    print_matrix,
    ticks_of,
)
from tests.daemon_world import OWNER, T0, Fakes, add_job
from tests.support.forkserver import ForkServer

MATRIX: list[MatrixRow] = []


@pytest.fixture
def orch(fakes: Fakes, tmp_path: Path, forkserver: ForkServer) -> Orch:
    return make_orch(fakes, tmp_path, forkserver)


IDLE_POINTS = ("after-idle-stop-requested", "after-idle-stop-call")


@pytest.mark.parametrize("point", IDLE_POINTS)
def test_killed_between_idles_cloud_stop_and_its_write_leaves_no_attempt_running_on_a_stopped_machine(
        point: str, fakes: Fakes, orch: Orch, tmp_path: Path) -> None:
    """A real ``kill -9`` (the process SIGKILLs itself) right after idle's stop was written, or right after the
    cloud's stop call and before the write of its end. The restarted process finds the attempt
    TERMINATE_REQUESTED with its cause (never RUNNING), finishes the stop and leaves the job STOPPED with no
    relaunch."""
    store = open_store(orch.env["ORCH_DATABASE_URL"])
    agents = tmp_path / "agents.json"
    agents.write_text(json.dumps({"*": {"alive": True, "gpu": [0.0]}}))     # heard every tick, and idle
    try:
        add_job(store, "train", idle_pct=10, idle_window="5m", idle_action="stop")
        assert drive(orch, T0, agents).returncode == 0                         # launched on the spot machine
        [machine] = fakes.live_instances()["vastai"]
        crashed = drive(orch, T0 + timedelta(seconds=30), agents, "--ticks", "12", "--step-s", "60",
                        crashpoint=point)
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-1500:]
        with fakes.vast.lock:
            raw = dict(fakes.vast.state.instances[int(machine.instance_id)])
        assert (raw["intended_status"] == "stopped") is (point == "after-idle-stop-call")
        with store.transaction() as tx:
            [a] = repo.list_attempts(tx, repo.require_job(tx, "train").id or 0)
        # Written BEFORE the cloud call: whatever the kill left, the attempt is not RUNNING.
        assert (a.state, a.end_cause) == (AttemptState.TERMINATE_REQUESTED.value, EndCause.IDLE_STOPPED.value)

        # Three ticks: the one that asks the stop again reports nothing (a stop call is not in a tick's report).
        recovery = ticks_of(drive(orch, T0 + timedelta(minutes=20), agents, "--ticks", "3", "--step-s", "30"))
        assert recovery[-1]["quiet"], recovery
        with store.transaction() as tx:
            job = repo.require_job(tx, "train")
            attempts = repo.list_attempts(tx, job.id or 0)
        assert [(x.state, x.end_cause) for x in attempts] == [(AttemptState.TERMINATED.value,
                                                                EndCause.IDLE_STOPPED.value)]
        assert job.status == "stopped"
        # Not running anywhere, and no relaunch. (A stopped Vast interruptible reads as outbid, PREEMPTED, and
        # is destroyed, disk and all: the disk is kept only where a stop is a stop; tests/test_idle*.py.)
        assert fakes.live_instances() == {"vastai": [], "lambda": []}
        did = f"{len(recovery)} ticks: the stop finished, no relaunch"
        MATRIX.append(("idle", point, "SIGKILL", did, "0 attempts RUNNING on a stopped machine"))
    finally:
        store.close()


def test_print_the_crash_matrix() -> None:
    """Runs last in this module (pytest keeps file order): prints what the cases above recorded."""
    if not MATRIX:
        pytest.skip("the crash cases did not run in this session")
    print_matrix(MATRIX, len(IDLE_POINTS))
    assert OWNER


class _Killed(BaseException):
    """The process dying at a crashpoint (in-process: nothing after the point runs; the store keeps what was
    committed before it, as after a SIGKILL)."""


@pytest.mark.parametrize("point", ["after-idle-stop-requested", "after-idle-stop-call"])
def test_killed_between_an_idle_stop_and_its_write_leaves_no_attempt_running_on_a_stopped_machine(
        point: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle machine (action: stop) whose daemon dies right after the stop was requested, or right after the
    cloud's stop call: a new daemon over the same store finishes the stop (asks it again where needed), keeps
    the disk (never a terminate), and leaves the attempt ended, the job STOPPED."""

    from orchestrator.config.file import OrchConfig
    from orchestrator.daemon.assembly import ServiceSettings, build_service
    from orchestrator.engine.hooks import AgentReport
    from orchestrator.engine.states import JobStatus
    from providers.base import InstanceState
    from tests.fakes.memory_provider import MemoryCloud, MemoryProvider
    from tests.support.manifests import manifest
    from tests.test_engine import CATALOG as ENGINE_CATALOG
    from tests.test_engine import ReportingMonitor

    cloud = MemoryCloud()
    url = f"sqlite:///{tmp_path / 'o.db'}"
    now = [T0]

    def daemon():  # type: ignore[no-untyped-def]
        monitor = ReportingMonitor()
        svc = build_service(config=OrchConfig(owner=OWNER), store=open_store(url),
                            providers={"aws": MemoryProvider("aws", ENGINE_CATALOG, cloud)}, catalog=ENGINE_CATALOG,
                            clock=lambda: now[0], monitor=monitor, settings=ServiceSettings(), lease_owner=None)
        return svc, monitor

    first, monitor = daemon()
    m = manifest("train", count=8, policies={"idle": {"min_gpu_util_pct": 10, "window": "5m", "action": "stop"}})
    assert first.store is not None
    with first.store.transaction() as tx:
        repo.apply_jobs(tx, [repo.AppliedJob(m, "h")], now=T0)
    import orchestrator.engine.idle as idle_module

    def kill_at(name: str) -> None:
        if name == point:
            raise _Killed(name)

    monkeypatch.setattr(idle_module, "crashpoint", kill_at)
    with pytest.raises(_Killed):
        for _ in range(20):
            first.reconciler.tick()
            for inst in cloud.instances.values():
                monitor.reports[inst.instance_id] = AgentReport(gpu_util_pct=(0.0,), heartbeat_at=now[0])
            now[0] += timedelta(minutes=1)
    first.close()
    monkeypatch.undo()
    [machine] = cloud.instances.values()
    assert machine.state is (InstanceState.STOPPED if point == "after-idle-stop-call" else InstanceState.RUNNING)

    second, _ = daemon()
    try:
        for _ in range(3):
            second.reconciler.tick()
            now[0] += timedelta(minutes=1)
        with second.store.transaction() as tx:       # type: ignore[union-attr]
            job = repo.require_job(tx, "train")
            [attempt] = repo.list_attempts(tx, job.id or 0)
        assert attempt.state == AttemptState.TERMINATED.value and attempt.end_cause == EndCause.IDLE_STOPPED.value
        assert job.status == JobStatus.STOPPED.value
        assert [i.state for i in cloud.instances.values()] == [InstanceState.STOPPED]     # stopped, not terminated
        assert cloud.calls["terminate"] == 0
    finally:
        second.close()
