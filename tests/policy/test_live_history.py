"""The daemon's record of spot machines as the policy's history (orchestrator/policy/live_history.py), the
store-to-history adapter (recovery_facts.spot_runs), and orch deciding from that history through the seam."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.engine.ports import AttemptRecord
from orchestrator.engine.recovery_facts import spot_runs
from orchestrator.engine.recovery_policy import RecoveryAction, RecoveryContext, SpotRun
from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.policy.live_history import place_history, stats_from
from orchestrator.policy.orch import OrchPolicy
from orchestrator.policy.recovery import SpotPolicyRecovery
from providers.base import Market
from tests.test_engine import offer

T0 = datetime(2026, 12, 1, tzinfo=UTC)
COOL = timedelta(minutes=30)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def test_one_place_machines_preemptions_and_gaps_by_hand() -> None:
    # az1: a machine 0-2 h preempted (after a notice); the next one there started at 3 h: an outage of 1 h;
    # it ran to 5 h and was moved off (not a preemption: available time, no end of availability seen);
    # a third ran 6-6.5 h and was preempted; now 6.75 h, within the 30 min cool-down: out for 0.25 h so far.
    runs = [SpotRun("az1", at(0), at(2), preempted=True, noticed=True),
            SpotRun("az1", at(3), at(5), preempted=False),
            SpotRun("az1", at(6), at(6.5), preempted=True)]
    stats = stats_from(runs, at(6.75), COOL)
    assert stats.up_runs == [2.0, 0.5] and stats.down_runs == [1.0]
    assert (stats.ended_up_runs, stats.ended_up_h) == (2, 2.5)
    # Seen: 2 + 1 + 2 up/out, then 0.5 up and 0.25 out = 5.75 h; available 2 + 2 + 0.5 = 4.5 h.
    assert stats.seen_h == pytest.approx(5.75) and stats.up_h == pytest.approx(4.5)
    assert stats.available is False and stats.streak_h == pytest.approx(0.25)
    # Past the cool-down nothing more is known: the outage counted is the cool-down's 0.5 h, not ended,
    # and the place counts as available again (as the seam's `available` does).
    later = stats_from(runs, at(8.0), COOL)
    assert later.seen_h == pytest.approx(6.0) and later.down_runs == [1.0]
    assert later.available is True and later.streak_h == 0.0


def test_a_running_machine_is_the_current_available_streak() -> None:
    stats = stats_from([SpotRun("az1", at(1), None, preempted=False)], at(4), COOL)
    assert stats.available is True and stats.streak_h == pytest.approx(3.0) and stats.up_runs == []


def test_the_set_history_merges_places() -> None:
    # az1 0-2 h preempted, az2 from 2.1 h to 5 h preempted, az1 again from 7 h, running at 8 h.
    runs = [SpotRun("az1", at(0), at(2), preempted=True), SpotRun("az2", at(2.1), at(5), preempted=True),
            SpotRun("az1", at(7), None, preempted=False)]
    (az1, az2), any_place = place_history(("az1", "az2"), runs, at(8), COOL)
    assert az1.up_runs == [2.0] and az1.down_runs == [5.0]             # az1 out from 2 h to its next start, 7 h
    assert az2.up_runs == pytest.approx([2.9]) and az2.down_runs == []
    assert az2.available is True                                        # its cool-down has passed
    # The set: spot 0-2, out 0.1 h, spot 2.1-5, out 2 h, spot since 7 h.
    assert any_place.up_runs == pytest.approx([2.0, 2.9]) and any_place.down_runs == pytest.approx([0.1, 2.0])
    assert any_place.available and any_place.streak_h == pytest.approx(1.0)


def attempt(i: int, zone: str, start: float | None, end: float | None, state: AttemptState,
            cause: EndCause | None = None, market: Market = Market.SPOT, rank: int = 0) -> AttemptRecord:
    return AttemptRecord(id=i, job_id=1, launch_id=f"l{i}", state=state, offer=offer("aws", 3.0, market, zone=zone),
                         started_at=None if start is None else at(start), ended_at=None if end is None else at(end),
                         end_cause=cause, node_rank=rank)


def test_the_store_adapter_reads_spot_machines_that_started() -> None:
    attempts = [
        attempt(3, "az2", 4, None, AttemptState.RUNNING),
        attempt(1, "az1", 0, 2, AttemptState.PREEMPTED, EndCause.NOTICED),
        attempt(2, "az1", None, 2.5, AttemptState.FAILED),                       # never started: no evidence
        attempt(4, "od", 2, 4, AttemptState.TERMINATED, market=Market.ON_DEMAND),  # on-demand: not spot history
        attempt(5, "az1", 0, 2, AttemptState.PREEMPTED, EndCause.PREEMPTED, rank=1),  # a gang's other node
    ]
    assert spot_runs(attempts) == (SpotRun("az1", at(0), at(2), preempted=True, noticed=True),
                                   SpotRun("az2", at(4), None, preempted=False))


def test_orch_in_the_daemon_relaunches_where_spot_has_lasted() -> None:
    # A 10 h job due 30 h after T0, 5 h in, just preempted in az1 (at 5 h). Its record: az1 flapped (16
    # machines of 0.1 h, each preempted), az2 held a machine 3 h until it was moved off (its end not a
    # preemption: no end of availability seen, so az2's runs are the prior's, 2 h). Both places have spot
    # offers at the same price, no cool-down. orch picks az2: az1's predicted lifetime is a tick (1 min) +
    # (16 x 0.083 + 2w) / (16 + w) = 0.22 h (w ~ 1, the prior's 2 h run) < d/(1-k) = 0.29 h at d 0.2, k 0.3.
    runs = tuple([SpotRun("az1", at(0.1 + 0.18 * i), at(0.2 + 0.18 * i), preempted=True) for i in range(15)]
                 + [SpotRun("az2", at(1.1), at(4.1), preempted=False),
                    SpotRun("az1", at(4.9), at(5.0), preempted=True)])
    ctx = RecoveryContext(
        now=at(5.0), relaunch_count=6, max_relaunches=50, markets=frozenset(Market), preemptions=[],
        cooldown=timedelta(minutes=0), deadline=at(30), estimated_hours=10.0, remaining_hours=6.0,
        started_at=T0, running_hours=4.0, spot_places=("az1", "az2"), spot_price_ratio=0.3,
        spot_place_ratios=(0.3, 0.3), spot_runs=runs)
    decision = SpotPolicyRecovery(OrchPolicy).decide(ctx)
    assert decision.action is RecoveryAction.RELAUNCH and decision.markets == frozenset({Market.SPOT})
    assert decision.exclude_places == frozenset({"az1"}) and "relaunch on spot in az2" in decision.reason
    # With only az1's record, az1 is not worth a launch (and the job is ahead of its line): orch waits.
    only_az1 = replace(ctx, spot_places=("az1",), spot_place_ratios=(0.3,),
                       spot_runs=tuple(r for r in runs if r.place == "az1"))
    assert SpotPolicyRecovery(OrchPolicy).decide(only_az1).action is RecoveryAction.WAIT
