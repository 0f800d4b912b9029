"""orch-mdp (orchestrator/policy/mdp.py, mdp_model.py): the learned availability model, the MDP's decisions on
hand-made traces with hand-computed costs, and 100% deadlines.

Conventions as in test_orch_od_odds.py: a tick pays what is left of the overhead first, then makes progress;
k = 0.3, on-demand 1, costs in on-demand hours.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from orchestrator.policy.mdp import MdpPolicy, solve, step_for
from orchestrator.policy.mdp_model import age_edges, chain, end_odds
from orchestrator.policy.model import ProblemSpec, ZoneStats
from orchestrator.policy.policies import GreedyPolicy
from orchestrator.policy.registry import make_policy
from orchestrator.policy.simulator import SimResult, simulate
from tests.policy._helpers import zones


def stats_of(pattern: str, gap_h: float) -> ZoneStats:
    stats = ZoneStats()
    for c in pattern:
        stats.observe(c == "1", gap_h)
    return stats


def run(
    pattern_before: str,
    job: str,
    work_h: float,
    deadline_h: float,
    overhead_h: float,
    gap_s: float,
    policy: object | None = None,
) -> SimResult:
    spec = ProblemSpec(work_h=work_h, deadline_h=deadline_h, overhead_h=overhead_h, spot_price=0.3)
    return simulate(
        spec, zones(pattern_before + job, gap_s=gap_s), policy or MdpPolicy(), len(pattern_before), keep_log=True
    )


def test_end_odds_by_hand() -> None:
    # Step 0.25 h; ended runs 0.25, 0.25, 0.75 h; prior an exponential 2 h run worth one run.
    edges = age_edges(0.25)
    odds = end_odds([0.25, 0.25, 0.75], None, 2.0, edges, 0.25)
    e = [math.exp(-a / 2.0) for a in (0.0, 0.25, 0.5, 0.75)]
    # Bucket [0, 0.25): three runs reached it, two ended in it; the prior reaches it with weight 1.
    assert odds[0] == pytest.approx((2 + e[0] - e[1]) / (3 + e[0]))
    # [0.25, 0.5): one run reached it (the 0.75 h one), none ended in it.
    assert odds[1] == pytest.approx((0 + e[1] - e[2]) / (1 + e[1]))
    # [0.5, 0.75): the 0.75 h run ended in it.
    assert odds[2] == pytest.approx((1 + e[2] - e[3]) / (1 + e[2]))
    # A bucket no run reached has the prior's odds: 1 - e^(-0.25 / 2).
    assert odds[5] == pytest.approx(1 - math.exp(-0.125))
    # A run in progress of 0.6 h counts as having outlived [0.25, 0.5), not [0.5, 0.75).
    with_censored = end_odds([0.25, 0.25, 0.75], 0.6, 2.0, edges, 0.25)
    assert with_censored[1] == pytest.approx((0 + e[1] - e[2]) / (2 + e[1]))
    assert with_censored[2] == pytest.approx(odds[2])


def test_chain_rows_are_distributions_and_ages_map_to_buckets() -> None:
    model = chain(stats_of("1100" * 30 + "1" * 7, 0.25), 0.25)
    assert np.allclose(model.trans.sum(axis=1), 1.0)
    n = len(model.edges) - 1
    assert model.state(True, 0.0) == 0 and model.state(True, 0.3) == 1 and model.state(False, 0.0) == n
    assert model.state(True, 1e6) == n - 1


def test_spot_always_there_is_taken_at_once() -> None:
    # C = 4 h, D = 8 h, d = 0.5 h, gap 0.5 h; spot has been available for two weeks and stays: one spot session
    # from t0, overhead + 4 h of work: 4.5 h at 0.3 = 1.35.
    res = run("1" * 48, "1" * 16, 4, 8, 0.5, 1800)
    assert res.log[0].action == "spot[0]"
    assert res.cost == pytest.approx(1.35) and res.met and res.launches == 1


def test_no_spot_ever_means_one_on_demand_session() -> None:
    # The same job where spot never comes: on-demand once, overhead + work = 4.5, met.
    res = run("0" * 48, "0" * 16, 4, 8, 0.5, 1800)
    assert res.cost == pytest.approx(4.5) and res.met and res.launches == 1


def test_runs_shorter_than_the_overhead_are_never_taken() -> None:
    # gap 0.25 h = the MDP's step, d = 0.5 h: the zone flaps, spot one tick (0.25 h) then out one tick, for two
    # weeks and through the job. A spot launch pays its overhead and is preempted before making progress:
    # orch-mdp never launches one and pays one on-demand session, 4.5. Greedy launches into every run and
    # pays 0.3 x 0.25 for each before the Safety Net's on-demand.
    flap = "10" * 600
    res = run(flap, "10" * 16, 4, 8, 0.5, 900)
    assert all(r.action != "spot[0]" for r in res.log)
    assert res.cost == pytest.approx(4.5) and res.met
    greedy = run(flap, "10" * 16, 4, 8, 0.5, 900, GreedyPolicy())
    assert greedy.cost > 4.5 + 0.07


def test_a_short_outage_is_waited_out() -> None:
    # Outages in the two weeks: all 0.5 h, spot runs 3.5 h (gap 0.5 h, d = 0.2 h). C = 5 h, D = 8 h: the slack
    # (3 h) holds the outages and overheads the model expects. Job: spot 1 h, out 0.5 h, spot to the end.
    hist = ("1" * 7 + "0") * 40
    res = run(hist, "11" + "0" + "1" * 13, 5, 8, 0.2, 1800)
    assert "on-demand" not in [r.action for r in res.log]
    # spot t0-t1 (0.2 overhead + 0.8 h of work), out t2 (preempted, waits), spot from t3 (0.2 overhead, then
    # the last 4.2 h): billed 5 h of work and two overheads, 0.3 x 5.4.
    assert res.cost == pytest.approx(0.3 * 5.4) and res.met and res.launches == 2
    # With 1.2 h of slack less (C = 6.2 h) the same outage leaves too little for the ones the model expects
    # ahead: the MDP buys on-demand for it.
    assert "on-demand" in [r.action for r in run(hist, "11" + "0" + "1" * 13, 6.2, 8, 0.2, 1800).log]


def test_the_mdp_prefers_spot_when_runs_last_and_on_demand_when_they_do_not() -> None:
    # Directly on the solver: from idle, spot available at age 0, plenty of slack: a zone whose runs last 10 h
    # is launched into; one whose runs all end within a step (0.25 h < d = 0.5 h) is not.
    step = step_for(0.5)
    long_runs = chain(stats_of(("1" * 40 + "0" * 4) * 8, step), step)
    short_runs = chain(stats_of("10" * 200, step), step)
    for model, takes_spot in ((long_runs, True), (short_runs, False)):
        plan = solve(model, step, 0.5, 0.3, 24.0, 8.0, step)
        assert (plan.action(24.0, 8.0, model.state(True, 0.0), 0) == 2) is takes_spot


def test_registered_as_orch_mdp() -> None:
    assert make_policy("orch-mdp").name == "orch-mdp"


@seed(20261206)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    trace=st.lists(st.booleans(), min_size=40, max_size=120),
    work=st.integers(2, 8),
    slack=st.integers(1, 6),
    overhead=st.sampled_from([0.05, 0.2, 0.5, 1.0]),
    gap_s=st.sampled_from([600.0, 1800.0]),
)
def test_every_deadline_is_met(trace: list[bool], work: int, slack: int, overhead: float, gap_s: float) -> None:
    spec = ProblemSpec(
        work_h=float(work), deadline_h=float(work + slack) + overhead, overhead_h=overhead, spot_price=0.3
    )
    row = "".join("1" if b else "0" for b in trace)
    zs = zones(row, row[::-1], gap_s=gap_s)
    for start in (0, len(trace) // 2):
        assert simulate(spec, zs, MdpPolicy(), start).met
