"""orch's forecast policy (orchestrator/policy/orch.py): each rule pinned on a hand-made trace, costs by hand.

Conventions of the hand computations: gap g, overhead d, spot price k, on-demand 1; a tick of spot pays what
is left of the overhead first, then makes progress; the history a job's policy sees is the trace before its
start tick.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.policy.forecast import RunTables, excess_mean, mean_run, residual
from orchestrator.policy.model import ON_DEMAND, WAIT, Mode, Observation, ProblemSpec, ZoneStats, spot
from orchestrator.policy.orch import OrchPolicy
from orchestrator.policy.policies import UniformProgressPolicy
from orchestrator.policy.simulator import SimResult, simulate
from orchestrator.policy.traces import Trace, ZoneSet
from tests.policy._helpers import zones


def run_both(spec: ProblemSpec, zs: ZoneSet, start: int, notice: bool = False) -> tuple[SimResult, SimResult]:
    up = simulate(spec, zs, UniformProgressPolicy(), start, notice=notice, keep_log=True)
    mine = simulate(spec, zs, OrchPolicy(), start, notice=notice, keep_log=True)
    return up, mine


def actions(result: SimResult) -> list[str]:
    return [r.action for r in result.log]


# --- the forecasts --------------------------------------------------------------------------------------
def stats_of(pattern: str, gap_h: float) -> ZoneStats:
    stats = ZoneStats()
    for c in pattern:
        stats.observe(c == "1", gap_h)
    return stats


def test_zone_stats_keep_the_lengths_of_ended_runs() -> None:
    stats = stats_of("1110011110", 0.5)
    # Runs: up 1.5, down 1.0, up 2.0, then a down run in progress (not ended).
    assert stats.up_runs == [1.5, 2.0] and stats.down_runs == [1.0]
    assert stats.available is False and stats.streak_h == 0.5 and stats.ended_up_runs == 2


def test_forecasts_by_hand() -> None:
    # Up runs 1, 1, 4 h; down runs 1, 3 h (gap 1 h); priors: up 2 h, down 1 h, each worth one run.
    stats = stats_of("1" + "0" + "1" + "000" + "1111" + "0", 1.0)
    t = RunTables()
    assert mean_run(t, stats, True) == pytest.approx((1 + 1 + 4 + 2) / 4)  # 2.0
    assert mean_run(t, stats, False) == pytest.approx((1 + 3 + 1) / 3)  # 5/3
    # E[X - 2 | X >= 2] over the up runs: only the 4 h run, 2 h left; the prior run survives 2 h with weight
    # e^(-2/2) and has 2 h left too (memoryless): (2 + 2 e^-1) / (1 + e^-1) = 2.
    assert residual(t, stats, True, 2.0) == pytest.approx(2.0)
    # Age 1: all three up runs qualify (excess 0, 0, 3) and the prior (weight e^-0.5, 2 h): (3 + 2w)/(3 + w).
    w = math.exp(-0.5)
    assert residual(t, stats, True, 1.0) == pytest.approx((3 + 2 * w) / (3 + w))
    # A run longer than any seen is expected to last about as long again.
    assert residual(t, stats, True, 6.0) == pytest.approx(6.0)
    # E[(L - 0.5)^+] over the down runs 1, 3 and the prior (1 h, e^-0.5 of it beyond 0.5 h): (0.5 + 2.5 + w)/3.
    assert excess_mean(t, stats, False, 0.5) == pytest.approx((0.5 + 2.5 + w) / 3)


# --- restart overhead break-evens ------------------------------------------------------------------------
def test_no_spot_from_idle_when_its_lifetime_is_below_d_over_1_minus_k() -> None:
    # gap 0.5 h, d 0.5 h, k 0.3: break-even d/(1-k) = 0.714 h. The zone has flapped in single ticks for 100 h,
    # so a new run's predicted lifetime is one tick, 0.5 h (+0.015 from the prior): not worth an overhead.
    # Job C=2, D=9 on the same flapping for 6 h, then spot for good.
    hist = "10" * 100
    spec = ProblemSpec(work_h=2, deadline_h=9, overhead_h=0.5, spot_price=0.3)
    up, mine = run_both(spec, zones(hist + "10" * 6 + "1" * 20, gap_s=1800), len(hist))
    # UP, by hand: t0 spot (overhead only, 0.15); t1 preempted, behind its line -> on-demand (0.5 overhead);
    # t2-t3 on-demand (hysteresis), done 1.0, 1.0; t4 spot (0.15); t5, t7, t9 waits, t6, t8, t10 spot (0.15
    # each, overhead only); t11 behind its line -> on-demand: 0.5 overhead, t12-t13 0.5 work each: done 7.0 h.
    # Cost 0.15 x 5 + 0.5 x 5 = 3.25... plus the t11 overhead tick: 0.75 + 3.0 = 3.75.
    assert actions(up)[:5] == ["spot[0]", "on-demand", "on-demand", "on-demand", "spot[0]"]
    assert up.cost == pytest.approx(3.75) and up.finish_h == pytest.approx(7.0)
    # orch never launches into the flapping zone: t0 waits (on its line), t1-t3 wait too (the early wait: the
    # window's first 0.2 x 9 = 1.8 h, the shortfall fits in the slack), and no outage of one tick is covered
    # (cover_pays: its residual at 0.5 h, (e^-0.5 x 1 h) / (100 + e^-0.5) = 0.006 h, is below 0.714 h); at t12
    # (6 h) the Safety Net (2 h of work + 2d in 3 h left) buys on-demand to the end: 0.5 overhead + 2 h of
    # work = 2.5, finished at 8.5 h. Without cover_pays the same 2.5 from t4 (2.0 h), finished at 4.5 h.
    assert "spot[0]" not in actions(mine) and actions(mine) == ["idle"] * 12 + ["on-demand"] * 5
    assert mine.cost == pytest.approx(2.5) and mine.finish_h == pytest.approx(8.5) and mine.met
    spec_zs = (spec, zones(hist + "10" * 6 + "1" * 20, gap_s=1800))
    off = simulate(*spec_zs, OrchPolicy(cover_pays=False), len(hist), keep_log=True)
    assert actions(off)[:5] == ["idle"] * 4 + ["on-demand"] and "spot[0]" not in actions(off)
    assert off.cost == pytest.approx(2.5) and off.finish_h == pytest.approx(4.5)


def observation(
    stats: ZoneStats, spec: ProblemSpec, *, mode: Mode, elapsed: float, done: float, gap: float
) -> Observation:
    return Observation(
        tick=int(elapsed / gap),
        elapsed_h=elapsed,
        gap_h=gap,
        spec=spec,
        work_done_h=done,
        mode=mode,
        zone=None,
        overhead_left_h=0.0,
        available=(stats.available,),
        spot_prices=(spec.spot_price,),
        history=(stats,),
        any_zone=stats,
    )


def test_leaving_on_demand_needs_a_longer_lifetime_than_leaving_idle() -> None:
    # gap 0.25 h, d 0.25 h, k 0.5: d/(1-k) = 0.5 h from idle, 2d/(1-k) = 1.0 h from on-demand.
    # The zone's available runs last 3 ticks (0.75 h), outages 8 ticks (2 h); a run has just started: its
    # lifetime is this tick + E[X - 0.25 | X >= 0.25] over 40 runs of 0.75 h and the prior (a 2 h run, weight
    # w = e^-0.125): 0.25 + (40 x 0.5 + 2w) / (40 + w) = 0.782 h: between the two break-evens.
    gap = 0.25
    stats = stats_of(("1" * 3 + "0" * 8) * 40 + "1", gap)
    spec = ProblemSpec(work_h=30, deadline_h=40, overhead_h=0.25, spot_price=0.5)
    policy = OrchPolicy()
    policy.reset(spec, 1)
    idle = observation(stats, spec, mode=Mode.IDLE, elapsed=10.0, done=7.0, gap=gap)
    w = math.exp(-0.125)
    assert policy.lifetime(idle, 0) == pytest.approx(0.25 + (40 * 0.5 + 2 * w) / (40 + w))
    # The forecast: rho = E[(U - d)^+] / (mean up + mean down) = ((40 x 0.5 + 2w) / 41) /
    # ((40 x 0.75 + 2) / 41 + (40 x 2 + 1) / 41) = 0.193 spot hours per hour: X = 23 - 0.193 x 30 = 17.2 h.
    rho = ((40 * 0.5 + 2 * w) / 41) / ((30 + 2) / 41 + (80 + 1) / 41)
    x = policy.shortfall(idle)
    assert x is not None and x == pytest.approx(23 - rho * 30)
    assert policy.decide(idle) == spot(0)  # 0.78 > 0.5: from idle, take it
    od = observation(stats, spec, mode=Mode.ON_DEMAND, elapsed=10.0, done=7.0, gap=gap)
    assert policy.decide(od) == ON_DEMAND  # 0.78 < 1.0: on on-demand, stay
    # slack_cost: with the slack short (X > 0) a launch's d of slack may be counted too (thresholds + d,
    # + 2d: 0.75 h and 1.5 h); measured dearer on average (docs/policy.md), off by default.
    careful = OrchPolicy(slack_cost=1.0)
    careful.reset(spec, 1)
    assert careful.decide(idle) == spot(0)  # 0.78 > 0.75


def test_on_demand_is_kept_when_it_finishes_for_less_than_spot_could() -> None:
    # 0.2 h of work left on on-demand, d 0.25, k 0.5: on-demand 0.2 <= spot's least 0.5 x (0.25 + 0.2) = 0.225.
    gap = 0.25
    stats = stats_of("1" * 400, gap)  # spot for 100 h without a break: a long lifetime
    spec = ProblemSpec(work_h=30, deadline_h=40, overhead_h=0.25, spot_price=0.5)
    policy = OrchPolicy()
    policy.reset(spec, 1)
    assert policy.decide(observation(stats, spec, mode=Mode.ON_DEMAND, elapsed=30.0, done=29.8, gap=gap)) == ON_DEMAND
    assert policy.decide(observation(stats, spec, mode=Mode.ON_DEMAND, elapsed=30.0, done=29.0, gap=gap)) == spot(0)


# --- the slack: wait outages out when the forecast says spot will do the work ----------------------------
def test_plenty_of_slack_waits_an_outage_out_where_uniform_progress_buys_on_demand() -> None:
    # History: spot for 20 h, out 2 h, ten times (rho ~ 0.9). Job C=4, D=12, d=0.5, k=0.3, gap 1 h; spot at
    # t0, out t1-t4, then back.
    hist = ("1" * 20 + "0" * 2) * 10
    spec = ProblemSpec(work_h=4, deadline_h=12, overhead_h=0.5, spot_price=0.3)
    up, mine = run_both(spec, zones(hist + "1" + "0" * 4 + "1" * 30), len(hist))
    # UP: t0 spot 0.5 overhead + 0.5 work (0.3); t1 waits (0.5 >= 4/12); t2 behind -> on-demand: 0.5 + 0.5;
    # t3, t4 on-demand: done 2.5; t5 spot (ahead of its line + 2d): 0.5 + 0.5, t6 1.0 -> done at 6.5 h.
    # Cost 0.3 + 3 x 1 + 0.3 + 0.15 = 3.75.
    assert up.cost == pytest.approx(3.75) and up.finish_h == pytest.approx(6.5)
    # orch: 3.5 h of work, 11 h left, the forecast gives ~9.9 h of spot: X < 0, wait the outage out;
    # t5 spot: 0.5 + 0.5, t6-t7 1.0 each, t8 the last 1.0 -> done at 9.0 h. Cost (0.5 + 0.5 + 3.5) x 0.3 = 1.5.
    assert actions(mine) == ["spot[0]", "idle", "idle", "idle", "idle", "spot[0]", "spot[0]", "spot[0]", "spot[0]"]
    assert mine.cost == pytest.approx(1.5) and mine.finish_h == pytest.approx(9.0)


def test_on_demand_covers_the_outages_expected_to_be_long() -> None:
    # gap 0.25 h, d 0.25 h. History: spot 4 h, out 0.5 h, spot 4 h, out 3 h, five times; then spot 4 h; now an
    # outage. Means with the priors: up (11 x 4 + 2)/12 = 3.833 h, down (5 x 0.5 + 5 x 3 + 1)/11 = 1.682 h,
    # a cycle 5.515 h. rho = E[(U - d)^+] / cycle = ((11 x 3.75 + 2 e^-0.125)/12) / 5.515 = 0.650.
    gap = 0.25
    base = ("1" * 16 + "00" + "1" * 16 + "0" * 12) * 5 + "1" * 16
    spec = ProblemSpec(work_h=30, deadline_h=40, overhead_h=0.25, spot_price=0.3)
    # 22 h left (n = 22 / 5.515 = 3.99 outages ahead), 18.5 h of work left: X = 18.5 - 0.650 x 22 = 4.20 h.
    # On-demand beyond outage age tau covers n x E[(L - tau - d)^+] of them:
    #   tau 0.25: E = (5 x 2.5 + e^-0.5) / 11 = 1.1915 -> 4.75 h > X: too much, wait;
    #   tau 0.75: E = (5 x 2.0 + e^-1.0) / 11 = 0.9425 -> 3.76 h <= X: this outage is a long one, cover it.
    for outage, expected in (("0", WAIT), ("000", ON_DEMAND)):
        stats = stats_of(base + outage, gap)
        policy = OrchPolicy()
        policy.reset(spec, 1)
        obs = observation(stats, spec, mode=Mode.IDLE, elapsed=18.0, done=11.5, gap=gap)
        assert policy.shortfall(obs) == pytest.approx(18.5 - 0.64996 * 22, abs=0.01)
        assert policy.decide(obs) == expected


# --- zone choice and the notice ---------------------------------------------------------------------------
def test_a_new_instance_goes_to_the_zone_expected_to_keep_spot_longest() -> None:
    # Two zones at the same price. Zone 0 flapped in single ticks, zone 1 held spot for 10 h at a time.
    # C=2, D=8, d=0.5, k=0.3, gap 1 h; during the job zone 0 keeps flapping, zone 1 keeps spot.
    z0 = "10" * 50 + "10" * 5
    z1 = (("1" * 10 + "0") * 10)[-100:] + "1" * 10
    spec = ProblemSpec(work_h=2, deadline_h=8, overhead_h=0.5, spot_price=0.3)
    up, mine = run_both(spec, zones(z0, z1), 100)
    # UP takes the first zone: t0 zone 0 (0.5 + 0.5), t1 preempted -> zone 1 (0.5 + 0.5), t2 1.0: 3 ticks x 0.3.
    assert actions(up) == ["spot[0]", "spot[1]", "spot[1]"] and up.cost == pytest.approx(0.9)
    # orch takes zone 1 at once: 0.5 + 0.5, then 1.0, then 0.5: 2.5 h x 0.3.
    assert actions(mine) == ["spot[1]", "spot[1]", "spot[1]"] and mine.cost == pytest.approx(0.75)


def test_the_zone_choice_weighs_the_price_against_the_lifetime() -> None:
    # Zone 0 at 0.1 with runs of 2 ticks, zone 1 at 0.3 with runs of 30 ticks (gap 1 h, d 0.5, r 10 h).
    # Saving (1 - k)(min(L, r) - d) - k d: zone 0: 0.9 x (2 - 0.5) - 0.05 = 1.30 (L = 1 + 1 = 2 h just after
    # a run started); zone 1: 0.7 x (10 - 0.5) - 0.15 = 6.5: zone 1, though dearer.
    z0 = stats_of(("11" + "0") * 60 + "1", 1.0)
    z1 = stats_of(("1" * 30 + "0") * 6 + "1", 1.0)
    spec = ProblemSpec(work_h=10, deadline_h=40, overhead_h=0.5, spot_price=0.3)
    policy = OrchPolicy()
    policy.reset(spec, 2)
    obs = Observation(
        tick=0,
        elapsed_h=0.0,
        gap_h=1.0,
        spec=spec,
        work_done_h=0.0,
        mode=Mode.IDLE,
        zone=None,
        overhead_left_h=0.0,
        available=(True, True),
        spot_prices=(0.1, 0.3),
        history=(z0, z1),
        any_zone=z1,
    )
    assert policy.lifetime(obs, 0) == pytest.approx(2.0, abs=0.05)
    assert policy.decide(obs) == spot(1)


def test_no_launch_into_a_zone_whose_preemption_is_announced() -> None:
    # History: spot 20 h, out 2 h, ten times. C=2, D=10, d=0.5, k=0.3; the zone has spot at t0, loses it at t1
    # (announced at t0), then keeps it.
    hist = ("1" * 20 + "0" * 2) * 10
    spec = ProblemSpec(work_h=2, deadline_h=10, overhead_h=0.5, spot_price=0.3)
    up, mine = run_both(spec, zones(hist + "10" + "1" * 20), len(hist), notice=True)
    # UP launches at t0 (0.5 + 0.5, 0.3), is preempted at t1, relaunches at t2 (0.5 + 0.5), t3 1.0: 0.9.
    assert actions(up) == ["spot[0]", "idle", "spot[0]", "spot[0]"] and up.cost == pytest.approx(0.9)
    # orch waits t0 and t1, then 0.5 + 0.5, 1.0, 0.5: 2.5 h x 0.3 = 0.75.
    assert actions(mine)[:3] == ["idle", "idle", "spot[0]"] and mine.cost == pytest.approx(0.75)


# --- the deadline ----------------------------------------------------------------------------------------
@st.composite
def zone_sets(draw: st.DrawFn) -> tuple[ProblemSpec, ZoneSet, int, bool]:
    gap_s = draw(st.sampled_from([300.0, 900.0, 1800.0, 3600.0]))
    gap_h = gap_s / 3600
    n_zones = draw(st.integers(1, 3))
    work = draw(st.floats(1.0, 12.0))
    slack = draw(st.floats(0.05, 1.5))
    overhead = draw(st.floats(0.02, 1.0)) * min(3 * gap_h, work * slack / 2)
    spec = ProblemSpec(
        work_h=work,
        deadline_h=work * (1 + slack) + overhead,
        overhead_h=overhead,
        spot_price=draw(st.floats(0.05, 0.9)),
    )
    ticks = math.ceil(spec.deadline_h / gap_h) + draw(st.integers(0, 200))
    traces = []
    for z in range(n_zones):
        up_mean, down_mean = draw(st.floats(0.3, 20.0)), draw(st.floats(0.1, 10.0))
        rng = random.Random(draw(st.integers(0, 2**16)))
        data: list[bool] = []
        state = rng.random() < 0.5
        while len(data) < ticks:
            length = max(1, round(rng.expovariate(1 / (up_mean if state else down_mean)) / gap_h))
            data.extend([state] * length)
            state = not state
        prices = None
        if draw(st.booleans()):
            prices = tuple(draw(st.floats(0.05, 0.9)) for _ in range(1)) * ticks
        traces.append(Trace(f"z{z}", gap_s, tuple(data[:ticks]), prices))
    start = draw(st.integers(0, max(0, ticks - math.ceil(spec.deadline_h / gap_h))))
    return spec, ZoneSet("random", tuple(traces)), start, draw(st.booleans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(zone_sets())
def test_orch_meets_every_deadline_on_random_zone_sets(case: tuple[ProblemSpec, ZoneSet, int, bool]) -> None:
    spec, zs, start, notice = case
    result = simulate(spec, zs, OrchPolicy(), start, notice=notice)
    assert result.met, (spec, start, notice)


def test_a_zone_flapping_lately_is_not_left_on_demand_for() -> None:
    # gap 0.25 h, d 0.25, k 0.5: from idle spot needs a lifetime > d/(1-k) = 0.5 h, from on-demand > 1.0 h
    # (plenty of slack here: X < 0, no extra). The zone held spot 5 h at a time 40 times, then its last ten
    # runs lasted one tick each; a run has just started.
    # Over all 50 runs: 0.25 + (40 x 4.75 + 2w) / (50 + w) = 4.07 h (w = e^-0.125, the prior's 2 h run).
    # Over the last 10: 0.25 + (0 + 2w) / (10 + w) = 0.41 h.
    gap = 0.25
    stats = stats_of(("1" * 20 + "00") * 40 + ("1" + "00") * 10 + "1", gap)
    spec = ProblemSpec(work_h=10, deadline_h=60, overhead_h=0.25, spot_price=0.5)
    policy = OrchPolicy()
    policy.reset(spec, 1)
    idle = observation(stats, spec, mode=Mode.IDLE, elapsed=10.0, done=5.0, gap=gap)
    w = math.exp(-0.125)
    assert policy.lifetime(idle, 0) == pytest.approx(0.25 + (40 * 4.75 + 2 * w) / (50 + w))
    assert policy.lifetime(idle, 0, cautious=True) == pytest.approx(0.25 + 2 * w / (10 + w))
    assert (policy.shortfall(idle) or 0.0) < 0
    assert policy.decide(idle) == spot(0)
    assert policy.decide(observation(stats, spec, mode=Mode.ON_DEMAND, elapsed=10.0, done=5.0, gap=gap)) == ON_DEMAND


def test_an_outage_being_covered_is_covered_to_its_end() -> None:
    # Spot for 20 h, out 2 h, ten times, and now 1 h into an outage: the forecast says spot will do the work
    # (X < 0), so from idle orch waits; already on on-demand it stays (stopping would cost the overhead
    # again when it has to start once more).
    stats = stats_of(("1" * 20 + "00") * 10 + "1" * 20 + "0", 1.0)
    spec = ProblemSpec(work_h=10, deadline_h=40, overhead_h=0.5, spot_price=0.3)
    policy = OrchPolicy()
    policy.reset(spec, 1)
    idle = observation(stats, spec, mode=Mode.IDLE, elapsed=10.0, done=6.0, gap=1.0)
    assert (policy.shortfall(idle) or 0.0) < 0
    assert policy.decide(idle) == WAIT
    assert policy.decide(observation(stats, spec, mode=Mode.ON_DEMAND, elapsed=10.0, done=6.0, gap=1.0)) == ON_DEMAND


def test_observe_run_is_observe_repeated_exactly() -> None:
    pattern = "1110000111110100" * 7
    one, bulk = stats_of(pattern, 195 / 3600), ZoneStats()
    i = 0
    while i < len(pattern):
        j = i
        while j < len(pattern) and pattern[j] == pattern[i]:
            j += 1
        bulk.observe_run(pattern[i] == "1", j - i, 195 / 3600)
        i = j
    assert bulk == one  # every field, floats bit for bit
