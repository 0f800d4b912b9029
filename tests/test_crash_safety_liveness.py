"""Crash safety, the liveness deadlines: a node that never reports within boot_timeout, an agent silent for
heartbeat_timeout, each crashed at every step of its handling through tests/support/crash_tick.py (orch's tick as
a REAL subprocess with the engine's clock and the agents' reports set from outside the process), SIGKILLed by
itself (ORCH_CRASHPOINT), restarted and ticked until quiet; the same invariants as tests/test_crash_safety.py
after every restart. Run with -s for the matrix.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.store import open_store, repo
from tests.crash_world import (
    BOOT_S,
    CKPT,
    HEARTBEAT_S,
    MatrixRow,
    Orch,
    creates_per_launch_id,
    drive,
    heard,
    make_orch,
    print_matrix,
    ticks_of,
)
from tests.daemon_world import OWNER, T0, Fakes, add_job, check_invariants
from tests.support.forkserver import ForkServer


@dataclass(frozen=True)
class DeadlineCase:
    deadline: str      # boot | heartbeat
    crashpoint: str


DEADLINE_CASES = [DeadlineCase(d, p) for d, kind in (("boot", "boot-timeout"), ("heartbeat", "node-silent"))
                  for p in (f"before-{kind}", "after-terminate-requested", f"after-{kind}", "before-launch-call")]

MATRIX: list[MatrixRow] = []


@pytest.fixture
def orch(fakes: Fakes, tmp_path: Path, forkserver: ForkServer) -> Orch:
    return make_orch(fakes, tmp_path, forkserver)


@pytest.mark.slow      # each case: a dozen orch processes against the wire fakes
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
            heard_at, beat = heard(fakes, orch, agents, store)
            start, step, cause = heard_at + timedelta(seconds=30), HEARTBEAT_S + 30, EndCause.SILENT
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
        recovery += ticks_of(drive(orch, restart, agents, "--until-quiet"))
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


def test_print_the_crash_matrix() -> None:
    """Runs last in this module (pytest keeps file order): prints what the cases above recorded."""
    if not MATRIX:
        pytest.skip("the crash cases did not run in this session")
    print_matrix(MATRIX, len(DEADLINE_CASES))
    assert OWNER
