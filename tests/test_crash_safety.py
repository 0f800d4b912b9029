"""Crash safety, the engine's steps: `python -m orchestrator tick` as a REAL subprocess, SIGKILLed by itself
(ORCH_CRASHPOINT) at every step of launch, relaunch (also between the passive sync and the steps that act on it)
and teardown; restarted without the crash point and ticked until quiet. The liveness deadlines are crashed the
same way in tests/test_crash_safety_liveness.py, idle's stop in tests/test_crash_safety_idle.py (three files, so
that the suite's two workers share them); tests/crash_world.py holds what they share.

After every restart: each cloud (the Vast.ai and Lambda wire fakes, in this test process) holds exactly the
instances of the store's live attempts, each active job has exactly one live attempt, no launch was made
twice (one create request per launch id), and an orphan planted in a cloud (tagged as orch's, with a launch
id the store never wrote) is terminated (grace 0 s via ORCH_ORPHAN_GRACE_S). Run with -s for the matrix.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.engine.states import DesiredState
from orchestrator.store import open_store, repo
from tests.crash_world import (
    MatrixRow,
    Orch,
    creates_per_launch_id,
    make_orch,
    print_matrix,
)
from tests.daemon_world import OWNER, Fakes, add_job, check_invariants
from tests.support.forkserver import ForkServer


@dataclass(frozen=True)
class Case:
    step: str          # launch | relaunch | teardown
    crashpoint: str


CASES = [Case("launch", p) for p in ("before-launch-call", "after-launch-call", "after-launched-written")] + \
        [Case("relaunch", p) for p in ("after-sync", "before-launch-call", "after-launch-call",
                                       "after-launched-written")] + \
        [Case("teardown", "after-terminate-requested")]


MATRIX: list[MatrixRow] = []


@pytest.fixture
def orch(fakes: Fakes, tmp_path: Path, forkserver: ForkServer) -> Orch:
    return make_orch(fakes, tmp_path, forkserver)


@pytest.mark.slow      # each case: two or three orch processes against the wire fakes
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


def test_print_the_crash_matrix() -> None:
    """Runs last in this module (pytest keeps file order): prints what the cases above recorded."""
    if not MATRIX:
        pytest.skip("the crash cases did not run in this session")
    print_matrix(MATRIX, len(CASES))
    assert OWNER
