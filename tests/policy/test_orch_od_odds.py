"""orch's odds check before leaving on-demand (orchestrator/policy/orch.py, ``od_odds``): when the job would
come back to on-demand once this spot run ends (one zone, or a set whose spot does not pay for its hops), the
zone's current run must also last the break-even 2d/(1-k) with probability at least one half, by its ended
runs; a long-tailed zone whose mean residual is carried by one long run is otherwise left for at every
young run, paying two overheads for each.

Hand-made trace, costs by hand (conventions as in test_orch_early.py: gap 0.5 h, d = 0.5 h, k = 0.3, on-demand
1; a tick pays what is left of the overhead first, then makes progress). The zone's two weeks before the job:
nine spot runs of 0.5 h and one of 20 h, outages of 2 h; the job starts in an outage. Break-even for leaving
on-demand 2d/(1-k) = 1.43 h. A spot run of age 0.5 h (its first tick): the lifetime is this tick and the mean
residual over the ten ended runs (the last ten too) with the prior (2 h, weight e^-0.25 = 0.78):
0.5 + (19.5 + 0.78 x 2) / 10.78 = 2.45 h > 1.43 h, so without the rule orch leaves on-demand for it; its odds of
lasting 1.43 h more: (runs longer than 1.93 h + 1) / (runs of 0.5 h or more + 1) = 2 / 11 = 0.18 < 1/2. At
age 1 h only the 20 h run reached it and outlived 1 h + 1.43 h: odds 2 / 2 = 1.
"""

from __future__ import annotations

import pytest

from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.orch import OrchPolicy
from orchestrator.policy.simulator import SimResult, simulate
from tests.policy._helpers import zones

HIST = "10000" * 9 + "1" * 40 + "0000"


def run(work_h: float, deadline_h: float, job: str, od_odds: bool) -> SimResult:
    spec = ProblemSpec(work_h=work_h, deadline_h=deadline_h, overhead_h=0.5, spot_price=0.3)
    return simulate(spec, zones(HIST + job, gap_s=1800), OrchPolicy(od_odds=od_odds), len(HIST), keep_log=True)


def actions(result: SimResult) -> list[str]:
    return [r.action for r in result.log]


def test_a_young_run_of_a_flappy_zone_is_not_left_for() -> None:
    # C = 4 h, D = 8 h. On-demand from t4 (the early wait holds t0-t3). Spot comes back at t8 for one tick
    # at a time.
    job = "00000000" + "10" * 6 + "1" * 10
    on, off = run(4, 8, job, True), run(4, 8, job, False)
    # Without the rule: on-demand t4-t7 (overhead, then 1.5 h of work), spot at t8 (its overhead, 0.15),
    # preempted at t9, on-demand again t9-t14 (a second overhead, then the last 2.5 h): 2.0 + 0.15 + 3.0.
    assert actions(off) == ["idle"] * 4 + ["on-demand"] * 4 + ["spot[0]"] + ["on-demand"] * 6
    assert off.cost == pytest.approx(5.15) and off.finish_h == pytest.approx(7.5)
    # With it: on-demand from t4 to the end, one overhead: nine ticks, 4.5.
    assert actions(on) == ["idle"] * 4 + ["on-demand"] * 9
    assert on.cost == pytest.approx(4.5) and on.finish_h == pytest.approx(6.5)
    assert on.met and off.met


def test_a_run_that_has_lasted_is_left_for_a_tick_later() -> None:
    # C = 6 h, D = 10 h; spot comes back at t8 for 13 h. What the rule costs: the long run is taken at t9,
    # once it is 1 h old (odds 1), not at t8.
    job = "00000000" + "1" * 26
    on, off = run(6, 10, job, True), run(6, 10, job, False)
    # Without: on-demand t2-t7 (3.0: overhead + 2.5 h), spot t8-t15 (overhead + 3.5 h, 8 x 0.15 = 1.2).
    assert actions(off) == ["idle"] * 2 + ["on-demand"] * 6 + ["spot[0]"] * 8
    assert off.cost == pytest.approx(4.2) and off.finish_h == pytest.approx(8.0)
    # With: on-demand t2-t8 (3.5: overhead + 3 h), spot t9-t15 (overhead + 3 h, 7 x 0.15 = 1.05).
    assert actions(on) == ["idle"] * 2 + ["on-demand"] * 7 + ["spot[0]"] * 7
    assert on.cost == pytest.approx(4.55) and on.finish_h == pytest.approx(8.0)
