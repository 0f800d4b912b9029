"""orch's early wait (orchestrator/policy/orch.py, ``early_wait``): in the window's first EARLY_WINDOW, no
outage is covered while the shortfall fits in the slack left beyond the Safety Net's two overheads.

Hand-made trace, costs by hand (conventions as in test_orch_v2.py: gap g, overhead d, spot price k, on-demand
1; a tick pays what is left of the overhead first, then makes progress). Every case: gap 0.5 h, d = 0.5 h,
k = 0.3, C = 2 h; the zone's history is "110000" repeated (spot runs of 1 h, outages of 2 h) and ends in an
outage, which the job's trace continues: from the second tick the outage is older than any seen, so the
cover rule alone would buy on-demand at once (the forecast's shortfall X > 0: spot's productive rate is
about (1 - d) / 3 h per hour, X = 2 - 0.17 x 9.5 > 0 at D = 10 h). Once spot is back, its predicted lifetime
(one tick and a residual of about 0.5 h at age 0.5 h) beats the break-even from idle d/(1-k) = 0.71 h but not
the one for leaving on-demand, 2d/(1-k) = 1.43 h, until its run is older than any seen (1.5 h: lifetime 2.5 h).
"""

from __future__ import annotations

import pytest

from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.orch import OrchPolicy
from orchestrator.policy.orch_forecasts import EARLY_WINDOW
from orchestrator.policy.simulator import SimResult, simulate
from tests.policy._helpers import zones

HIST = "110000" * 20


def run(deadline_h: float, job: str, early_wait: bool) -> SimResult:
    spec = ProblemSpec(work_h=2, deadline_h=deadline_h, overhead_h=0.5, spot_price=0.3)
    return simulate(spec, zones(HIST + job, gap_s=1800), OrchPolicy(early_wait=early_wait), len(HIST),
                    keep_log=True)


def actions(result: SimResult) -> list[str]:
    return [r.action for r in result.log]


def test_early_in_the_window_an_outage_is_waited_out_while_the_slack_holds_the_shortfall() -> None:
    # D = 10 h: the early window is the first 2 h; slack at t1 = 9.5 - 2 - 2d = 6.5 h > X.
    # Spot returns at t3 (1.5 h in).
    on, off = run(10, "000" + "1" * 30, True), run(10, "000" + "1" * 30, False)
    # With the rule: idle t0-t2 (free), spot from t3: overhead 0.5 h, then 2 h of work in four ticks;
    # five spot ticks of 0.5 h at 0.3: 0.75; done at 4.0 h.
    assert actions(on) == ["idle"] * 3 + ["spot[0]"] * 5
    assert on.cost == pytest.approx(5 * 0.5 * 0.3) and on.finish_h == pytest.approx(4.0)
    assert on.normalized_cost == pytest.approx(0.75 / 2.5)
    # Without it: on-demand from t1 (overhead at t1, 0.5 h of work at t2, t3, t4); spot at t3-t4 is not worth
    # leaving on-demand for (lifetime ~1 h < 1.43 h); at t5 the spot run is older than any seen (lifetime
    # 2.5 h) and 0.5 h of work is left: spot, overhead at t5, the work at t6. Cost 4 x 0.5 + 2 x 0.15 = 2.3.
    assert actions(off) == ["idle"] + ["on-demand"] * 4 + ["spot[0]"] * 2
    assert off.cost == pytest.approx(4 * 0.5 + 2 * 0.5 * 0.3) and off.finish_h == pytest.approx(3.5)
    assert on.met and off.met


def test_the_early_wait_ends_with_the_early_window() -> None:
    # The outage lasts 3 h; the early window ends at EARLY_WINDOW x 10 h = 2 h (t4): on-demand then
    # (overhead at t4, work at t5, t6, t7); spot back at t6 but not left for until its run is 1.5 h old (t8),
    # with 0.5 h of work left: overhead at t8, work at t9, done at 5.0 h. Cost 4 x 0.5 + 2 x 0.15 = 2.3.
    assert EARLY_WINDOW * 10 == 2.0    # the window of these cases
    on = run(10, "0" * 6 + "1" * 30, True)
    assert actions(on) == ["idle"] * 4 + ["on-demand"] * 4 + ["spot[0]"] * 2
    assert on.cost == pytest.approx(2.3) and on.finish_h == pytest.approx(5.0)
    # Without the rule: on-demand from t1, done at t5 (overhead at t1, then four ticks of work): 2.5.
    off = run(10, "0" * 6 + "1" * 30, False)
    assert actions(off) == ["idle"] + ["on-demand"] * 5
    assert off.cost == pytest.approx(2.5)


def test_a_shortfall_the_slack_cannot_hold_is_covered_at_once() -> None:
    # D = 4 h: slack at t1 = 3.5 - 2 - 2d = 0.5 h, below X (about 2 - 0.17 x 3.5 = 1.4 h): the rule does not
    # fire, and orch buys on-demand at t1 as without it: overhead, then four ticks of work, 2.5; done at 3.0 h.
    on, off = run(4, "000" + "1" * 30, True), run(4, "000" + "1" * 30, False)
    assert actions(on) == actions(off) == ["idle"] + ["on-demand"] * 5
    assert on.cost == off.cost == pytest.approx(5 * 0.5)
    assert on.finish_h == pytest.approx(3.0)
