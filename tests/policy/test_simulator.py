"""The simulator applies the problem's rules; every expected figure below is worked out by hand."""

from __future__ import annotations

import pytest

from orchestrator.policy.model import ON_DEMAND, WAIT, Action, Observation, ProblemError, ProblemSpec, spot
from orchestrator.policy.policies import GreedyPolicy, OnDemandPolicy, UniformProgressPolicy
from orchestrator.policy.simulator import PolicyError, simulate
from tests.policy._helpers import Scripted, zones


def test_first_launch_pays_the_overhead_and_the_last_tick_is_billed_only_as_used() -> None:
    # gap 1 h, C=2, d=0.5, k=0.5, spot always there. Tick 0: 0.5 overhead + 0.5 work; tick 1: 1 work;
    # tick 2: the last 0.5 work -> finish at 2.5 h, billed 2.5 h x 0.5 = 1.25; on-demand alone costs 2.5.
    spec = ProblemSpec(work_h=2, deadline_h=10, overhead_h=0.5, spot_price=0.5)
    r = simulate(spec, zones("1111111111"), GreedyPolicy())
    assert r.met and r.finish_h == pytest.approx(2.5)
    assert r.cost == pytest.approx(1.25) and r.normalized_cost == pytest.approx(0.5)
    assert (r.preemptions, r.switches, r.launches) == (0, 0, 1)


def test_preempted_tick_is_not_billed_and_the_new_instance_pays_the_overhead_again() -> None:
    # Tick 0 spot: 0.5 overhead + 0.5 work, 1 h billed x 0.5 = 0.5. Tick 1: zone at 0 -> preempted at the
    # start, not billed; greedy waits. Tick 2: new spot, 0.5 overhead + 0.5 work (done 1.0). Tick 3: 1 work
    # -> done at 4.0 h. Billed: ticks 0, 2, 3 = 3 h x 0.5 = 1.5.
    spec = ProblemSpec(work_h=2, deadline_h=10, overhead_h=0.5, spot_price=0.5)
    r = simulate(spec, zones("1011111111"), GreedyPolicy(), keep_log=True)
    assert r.met and r.finish_h == pytest.approx(4.0)
    assert r.cost == pytest.approx(1.5)
    assert (r.preemptions, r.switches, r.launches) == (1, 0, 2)
    assert r.log is not None and r.log[1].action == "idle" and r.log[1].cost == pytest.approx(0.5)


def test_every_switch_of_zone_or_market_is_a_new_instance_with_its_overhead() -> None:
    # gap 1 h, d=0.5, C=3, prices: zone0 0.2, zone1 0.4, on-demand 1. Script: spot0, spot1, OD, OD, wait, OD.
    # t0 spot0: 0.5 ovh + 0.5 work, cost 0.2. t1 spot1 (switch): 0.5+0.5, cost 0.4 (done 1.0).
    # t2 OD (switch): 0.5+0.5, cost 1 (done 1.5). t3 OD: 1 work, cost 1 (done 2.5). t4 wait: 0.
    # t5 OD (new, not a switch): 0.5 ovh + 0.5 work -> done 3.0 at 6.0 h, cost 1. Total 3.6.
    spec = ProblemSpec(work_h=3, deadline_h=12, overhead_h=0.5, spot_price=0.3)
    zs = zones("1" * 12, "1" * 12, prices=[[0.2] * 12, [0.4] * 12])
    r = simulate(spec, zs, Scripted([spot(0), spot(1), ON_DEMAND, ON_DEMAND, WAIT, ON_DEMAND]))
    assert r.met and r.finish_h == pytest.approx(6.0)
    assert r.cost == pytest.approx(3.6)
    assert (r.switches, r.launches, r.preemptions) == (2, 4, 0)
    assert r.spot_h == pytest.approx(2.0) and r.on_demand_h == pytest.approx(3.0)


def test_the_deadline_is_hard() -> None:
    # On-demand from the start fits exactly: 0.5 overhead + 2 work = 2.5 h = D.
    spec = ProblemSpec(work_h=2, deadline_h=2.5, overhead_h=0.5)
    ok = simulate(spec, zones("000"), OnDemandPolicy())
    assert ok.met and ok.finish_h == pytest.approx(2.5) and ok.normalized_cost == pytest.approx(1.0)
    # Waiting one tick first cannot make it: the run stops at the deadline, unfinished.
    late = simulate(spec, zones("000"), Scripted([WAIT, ON_DEMAND]))
    assert not late.met and late.finish_h is None
    assert late.cost == pytest.approx(1.5)  # only up to the deadline: tick 1 full, tick 2 cut at 2.5 h


def test_a_deadline_part_way_through_a_tick_still_counts_the_work_before_it() -> None:
    # gap 1 h: tick 0 = 0.5 overhead + 0.5 work, tick 1 = the last 1.0 work, done at 2.0 h = D.
    spec = ProblemSpec(work_h=1.5, deadline_h=2.0, overhead_h=0.5)
    r = simulate(spec, zones("00"), OnDemandPolicy())
    assert r.met and r.finish_h == pytest.approx(2.0) and r.cost == pytest.approx(2.0)


def test_asking_for_spot_where_there_is_none_is_a_policy_error() -> None:
    spec = ProblemSpec(work_h=1, deadline_h=5, overhead_h=0.1)
    with pytest.raises(PolicyError, match="not available"):
        simulate(spec, zones("01111"), Scripted([spot(0)]))


def test_policy_sees_only_the_past_and_a_notice_only_when_asked() -> None:
    spec = ProblemSpec(work_h=1, deadline_h=6, overhead_h=0.1)
    p = Scripted([WAIT] * 3 + [ON_DEMAND])
    simulate(spec, zones("110100"), p)
    assert [o.available for o in p.seen[:3]] == [(True,), (True,), (False,)]
    assert all(o.notice == () for o in p.seen)
    assert p.history_seen[2] == pytest.approx((3.0, 2.0))  # hours seen, hours available, at tick 2
    p2 = Scripted([WAIT] * 3 + [ON_DEMAND])
    simulate(spec, zones("110100"), p2, notice=True)
    assert [o.notice for o in p2.seen[:3]] == [(False,), (True,), (False,)]


def test_the_history_starts_with_the_trace_before_the_job_and_never_its_future(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import orchestrator.policy.simulator as sim

    spec = ProblemSpec(work_h=1, deadline_h=3, overhead_h=0.1)
    p = Scripted([WAIT, ON_DEMAND])
    simulate(spec, zones("1101" "0" "111"), p, start_tick=4)         # 3 of the 4 hours before were up
    assert p.history_seen[0] == pytest.approx((5.0, 3.0))           # those 4 hours, then tick 4 itself
    monkeypatch.setattr(sim, "HISTORY_H", 2.0)                       # a shorter memory: the 2 hours before
    p2 = Scripted([WAIT, ON_DEMAND])
    simulate(spec, zones("1101" "0" "111"), p2, start_tick=4)
    assert p2.history_seen[0] == pytest.approx((3.0, 1.0))


def test_ticks_past_the_end_of_the_trace_have_no_spot() -> None:
    spec = ProblemSpec(work_h=2, deadline_h=6, overhead_h=0.5, spot_price=0.5)
    r = simulate(spec, zones("11"), GreedyPolicy(), keep_log=True)
    assert r.met and r.preemptions == 1  # spot for ticks 0-1 (1.5 h of work), then on-demand after the trace
    assert r.log is not None and r.log[2].available == (False,)


@pytest.mark.parametrize(("work", "deadline", "overhead", "price", "message"), [
    (48, 48, 0.2, 0.3, "must be longer than the work"),
    (48, 72, 0.2, -0.1, "must not be negative"),
    (48, 72, 72, 0.3, "must be shorter than the deadline"),
    (48, 48.1, 0.2, 0.3, "not even on-demand"),
    (0, 72, 0.2, 0.3, "work must be positive"),
])
def test_problems_that_cannot_be_posed_are_refused(work: float, deadline: float, overhead: float, price: float,
                                                   message: str) -> None:
    with pytest.raises(ProblemError, match=message):
        ProblemSpec(work, deadline, overhead, price)



def test_a_policy_that_needs_no_history_is_shown_none_and_a_subclass_is_shown_it_again() -> None:
    seen: list[tuple[int, bool]] = []

    class Watching(UniformProgressPolicy):
        def decide(self, obs: Observation) -> Action:
            seen.append((len(obs.history), obs.any_zone is not None))
            return super().decide(obs)

    class Blind(Watching):
        needs_history = False

    spec = ProblemSpec(work_h=1, deadline_h=3, overhead_h=0.5, spot_price=0.3)
    zs = zones("1100110011", "0110011001", gap_s=1800)
    up = simulate(spec, zs, UniformProgressPolicy(), 4)
    watched = simulate(spec, zs, Watching(), 4)       # UP's flag is not inherited
    assert seen and all(s == (2, True) for s in seen)
    seen.clear()
    blind = simulate(spec, zs, Blind(), 4)
    assert seen and all(s == (0, False) for s in seen)
    # The same decisions either way: UP never reads the history.
    assert up.cost == watched.cost == blind.cost
