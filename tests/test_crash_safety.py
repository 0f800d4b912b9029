"""Crash safety: `python -m orchestrator tick` as a REAL subprocess, SIGKILLed by itself (ORCH_CRASHPOINT) at
every step of launch, relaunch (also between the passive sync and the steps that act on it) and teardown;
restarted without the crash point and ticked until quiet. The liveness deadlines (a node that never reports
within boot_timeout, an agent silent for heartbeat_timeout) are crashed at each of their steps the same way,
through tests/support/crash_tick.py (orch's tick with the engine's clock and the agents' reports set from
outside the process).

After every restart: each cloud (the Vast.ai and Lambda wire fakes, in this test process) holds exactly the
instances of the store's live attempts, each active job has exactly one live attempt, no launch was made
twice (one create request per launch id), and an orphan planted in a cloud (tagged as orch's, with a launch
id the store never wrote) is terminated (grace 0 s via ORCH_ORPHAN_GRACE_S). Run with -s for the matrix.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.engine.states import AttemptState, DesiredState, EndCause
from orchestrator.store import open_store, repo
from orchestrator.store.db import Store
from tests.daemon_world import CATALOG, OWNER, T0, Fakes, add_job, check_invariants

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    step: str          # launch | relaunch | teardown
    crashpoint: str


CASES = [Case("launch", p) for p in ("before-launch-call", "after-launch-call", "after-launched-written")] + \
        [Case("relaunch", p) for p in ("after-sync", "before-launch-call", "after-launch-call",
                                       "after-launched-written")] + \
        [Case("teardown", "after-terminate-requested")]


@dataclass(frozen=True)
class DeadlineCase:
    deadline: str      # boot | heartbeat
    crashpoint: str


DEADLINE_CASES = [DeadlineCase(d, p) for d, kind in (("boot", "boot-timeout"), ("heartbeat", "node-silent"))
                  for p in (f"before-{kind}", "after-terminate-requested", f"after-{kind}", "before-launch-call")]

MATRIX: list[tuple[str, str, str, str, str]] = []


def write_catalog(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rows = ["provider,instance_type,region,zone,gpu,gpu_count,vram_gb,vcpus,memory_gb,interconnect,market,price_hr,"
            "price_as_of,price_as_of_approximate"]
    for o in CATALOG:
        rows.append(f"{o.provider},{o.instance_type},\"{o.region}\",,{o.gpu},{o.gpu_count},{o.vram_gb},{o.vcpus},"
                    f"{o.memory_gb},{o.interconnect.value},{o.market.value},{o.price_hr},{o.price_as_of},false")
    (directory / "offers.csv").write_text("\n".join(rows) + "\n")
    as_of = {p: {"date": "2026-12-01", "note": "test catalog"} for p in ("vastai", "lambda")}
    (directory / "catalog.json").write_text(json.dumps({"approximate": False, "source": "test", "as_of": as_of}))


@dataclass
class Orch:
    """`python -m orchestrator ...` against the fakes, with the store and config in tmp_path."""

    env: dict[str, str]

    def run(self, *args: str, crashpoint: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if crashpoint:
            env["ORCH_CRASHPOINT"] = crashpoint
        return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=ROOT, env=env, text=True,
                              capture_output=True, timeout=120)

    def ticks(self, *args: str, crashpoint: str | None = None) -> list[dict[str, object]]:
        done = self.run("tick", "--json", *args, crashpoint=crashpoint)
        assert done.returncode == 0, f"tick failed ({done.returncode}): {done.stderr[-2000:]}"
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def orch(fakes: Fakes, tmp_path: Path) -> Orch:
    config = tmp_path / "config.yaml"
    config.write_text(fakes.config_yaml())
    write_catalog(tmp_path / "catalog")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(ORCH_CONFIG=str(config), ORCH_DATABASE_URL=f"sqlite:///{tmp_path / 'orch.db'}",
               ORCH_CATALOG_DIR=str(tmp_path / "catalog"), ORCH_ORPHAN_GRACE_S="0",
               XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_DATA_HOME=str(tmp_path / "data"),
               PYTHONPATH=str(ROOT))
    return Orch(env)


def creates_per_launch_id(fakes: Fakes) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in fakes.vast.requests:
        if r.method == "PUT" and r.path.startswith("/api/v0/asks/"):
            label = str((r.body or {}).get("label", ""))
            counts[label.rsplit("-", 1)[-1]] = counts.get(label.rsplit("-", 1)[-1], 0) + 1
    for r in fakes.lam.launches():
        name = str((r.body or {}).get("name", ""))
        counts[name.rsplit("-", 1)[-1]] = counts.get(name.rsplit("-", 1)[-1], 0) + 1
    return counts


@pytest.mark.parametrize("case", CASES, ids=[f"{c.step}-{c.crashpoint}" for c in CASES])
def test_killed_at_every_step_recovers_without_duplicates_or_leaks(case: Case, fakes: Fakes, orch: Orch) -> None:
    store = open_store(orch.env["ORCH_DATABASE_URL"])
    try:
        add_job(store, "train")
        if case.step != "launch":
            orch.ticks("--until-quiet")
            [spot] = fakes.live_instances()["vastai"]
            if case.step == "relaunch":
                fakes.vast.outbid(spot.instance_id)
            else:
                with store.transaction() as tx:
                    repo.set_desired_state(tx, "train", DesiredState.DELETED)

        crashed = orch.run("tick", "--json", crashpoint=case.crashpoint)
        assert crashed.returncode == -signal.SIGKILL, (
            f"expected death by SIGKILL at {case.crashpoint}, got {crashed.returncode}: {crashed.stderr[-1500:]}")

        orphan = fakes.plant_orphan("lambda")
        recovery = orch.ticks("--until-quiet")
        assert recovery and recovery[-1]["quiet"], recovery

        check_invariants(fakes, store)
        held = {i.instance_id for insts in fakes.live_instances().values() for i in insts}
        assert orphan not in held
        creates = creates_per_launch_id(fakes)
        dup = {k: v for k, v in creates.items() if v > 1}
        assert not dup, f"launched twice: {dup}"
        keys = ("adopted", "launched", "relaunched", "preempted", "terminated", "orphans_terminated")
        total = {k: sum(int(t[k]) for t in recovery) for k in keys}  # type: ignore[call-overload]
        did = ", ".join(f"{k} {v}" for k, v in total.items() if v) + f" ({len(recovery)} ticks)"
        # The restart reused the crashed run's launch id (re-asked or adopted): no extra attempt was planned.
        with store.transaction() as tx:
            planned = len(repo.list_attempts(tx, repo.require_job(tx, "train").id or 0))
        assert planned == (2 if case.step == "relaunch" else 1), f"{planned} attempts"
        expected_live = 0 if case.step == "teardown" else 1
        assert sum(len(v) for v in fakes.live_instances().values()) == expected_live
        MATRIX.append((case.step, case.crashpoint, "SIGKILL", did,
                       f"clouds == store, {expected_live} live, 0 duplicate launches, orphan collected"))
    finally:
        store.close()


BOOT_S, HEARTBEAT_S = 600, 300
CKPT = "s3://ckpt/train/step-5"


def drive(orch: Orch, now: datetime, agents: Path, *extra: str,
          crashpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**orch.env, "ORCH_BOOT_TIMEOUT_S": str(BOOT_S), "ORCH_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_S)}
    if crashpoint:
        env["ORCH_CRASHPOINT"] = crashpoint
    return subprocess.run([sys.executable, "-m", "tests.support.crash_tick", "--now", now.isoformat(),
                           "--reports", str(agents), *extra], cwd=ROOT, env=env, text=True, capture_output=True,
                          timeout=120)


def _heard(fakes: Fakes, orch: Orch, agents: Path, store: Store) -> tuple[datetime, float]:
    """Tick until the spot machine's agent has been heard (its heartbeat moving); returns the engine's time
    and the agent's last heartbeat."""
    [spot] = fakes.live_instances()["vastai"]
    now = T0
    for beat in range(1, 8):
        now += timedelta(seconds=30)
        agents.write_text(json.dumps({spot.instance_id: {"heartbeat": 1000 + beat, "checkpoint": [CKPT, 5]}}))
        assert drive(orch, now, agents).returncode == 0
        with store.transaction() as tx:
            [a] = repo.list_attempts(tx, repo.require_job(tx, "train").id or 0)
        if a.heard_at is not None:
            return now, 1000.0 + beat
    raise AssertionError("the agent was never heard")


def _ticks(done: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("case", DEADLINE_CASES, ids=[f"{c.deadline}-{c.crashpoint}" for c in DEADLINE_CASES])
def test_killed_at_every_liveness_step_recovers_without_duplicates_or_leaks(
        case: DeadlineCase, fakes: Fakes, orch: Orch, tmp_path: Path) -> None:
    """The killed run ticks twice, a deadline apart: the first tick starts (or hears) the node, the second
    decides and is killed at the crashpoint; the restarted daemon settles from the store's marks."""
    store = open_store(orch.env["ORCH_DATABASE_URL"])
    agents = tmp_path / "agents.json"
    agents.write_text("{}")
    try:
        add_job(store, "train")
        assert drive(orch, T0, agents).returncode == 0                  # launched on the spot machine
        [spot] = fakes.live_instances()["vastai"]
        if case.deadline == "boot":                                     # it never reports
            start, step, cause = T0 + timedelta(seconds=30), BOOT_S + 30, EndCause.BOOT_TIMEOUT
            agents.write_text(json.dumps({spot.instance_id: None, "*": {"alive": True}}))
        else:                                                           # heard, then silent
            heard, beat = _heard(fakes, orch, agents, store)
            start, step, cause = heard + timedelta(seconds=30), HEARTBEAT_S + 30, EndCause.SILENT
            agents.write_text(json.dumps({spot.instance_id: {"heartbeat": beat, "checkpoint": [CKPT, 5]},
                                          "*": {"alive": True}}))     # any replacement reports

        crashed = drive(orch, start, agents, "--ticks", "2", "--step-s", str(step), crashpoint=case.crashpoint)
        assert crashed.returncode == -signal.SIGKILL, (
            f"expected death by SIGKILL at {case.crashpoint}, got {crashed.returncode}: {crashed.stderr[-1500:]}")

        orphan = fakes.plant_orphan("lambda")
        restart = start + timedelta(seconds=step)
        recovery: list[dict[str, object]] = []
        # Killed before anything was written, the restarted daemon decides again at its first tick: every deadline
        # counts from the store's marks (the launch, the last heartbeat heard), not from its own start.
        recovery += _ticks(drive(orch, restart, agents, "--until-quiet"))
        assert recovery[-1]["quiet"], recovery

        check_invariants(fakes, store)
        assert orphan not in {i.instance_id for insts in fakes.live_instances().values() for i in insts}
        dup = {k: v for k, v in creates_per_launch_id(fakes).items() if v > 1}
        assert not dup, f"launched twice: {dup}"
        with store.transaction() as tx:
            first, second = repo.list_attempts(tx, repo.require_job(tx, "train").id or 0)
        # FAILED, or TERMINATED when the restart found it TERMINATE_REQUESTED and the cloud confirmed it gone.
        assert first.state in (AttemptState.FAILED.value, AttemptState.TERMINATED.value)
        assert first.end_cause == cause.value
        assert second.checkpoint_restored == (CKPT if case.deadline == "heartbeat" else None)
        assert second.state == AttemptState.RUNNING.value
        # The lost machine is gone; the one live machine is the replacement, on the other provider.
        assert fakes.live_instances()["vastai"] == [] and len(fakes.live_instances()["lambda"]) == 1
        keys = ("adopted", "launched", "relaunched", "preempted", "terminated", "orphans_terminated")
        total = {k: sum(int(t[k]) for t in recovery) for k in keys}  # type: ignore[call-overload]
        did = ", ".join(f"{k} {v}" for k, v in total.items() if v) + f" ({len(recovery)} ticks)"
        MATRIX.append((case.deadline, case.crashpoint, "SIGKILL", did,
                       "clouds == store, 1 live, 0 duplicate launches, orphan collected"))
    finally:
        store.close()


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
        recovery = _ticks(drive(orch, T0 + timedelta(minutes=20), agents, "--ticks", "3", "--step-s", "30"))
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
    print("\ncrash-safety matrix (step x crash point -> outcome after restart)")
    print(f"{'step':<9} {'crash point':<26} {'died':<8} {'restart did (all ticks until quiet)':<52} invariants")
    for step, point, died, did, inv in MATRIX:
        print(f"{step:<9} {point:<26} {died:<8} {did:<52} {inv}")
    assert len(MATRIX) == len(CASES) + len(DEADLINE_CASES) + len(IDLE_POINTS)
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
