"""orch's aged-run gate (orchestrator/policy/orch.py, ``aged_gate``): in a zone set, from idle at or ahead of
UP's line with far more slack than the job needs (X < -AGED_SPARE_BREAK_EVENS x d/(1-k)), spot only in a
zone whose current run has lasted AGED_RUN_OVERHEADS x d; otherwise the job waits.

Hand-made zone set, costs by hand (conventions as in test_orch_early.py: a tick pays what is left of the
overhead first, then makes progress). Gap 0.1 h, d = 0.1 h (one tick), k = 0.3, C = 4 h, D = 40 h. Both
zones' two weeks before the job: spot runs of 2 h and outages of 0.5 h; zone 0 is in a spot run at the
start (2 h old), zone 1 in an outage. Spot's productive rate is about (2 - 0.1) / 2.5 = 0.76 per hour (0.74
with the priors), so the shortfall X is about 1.1 - 0.74 x 37 = -26 h when the hop comes (3 h in, 1.1 h of
work left): far below -20 x d/(1-k) = -2.86 h. The break-even
from idle d/(1-k) is 0.143 h, the gate's age 2d = 0.2 h (two ticks).
"""

from __future__ import annotations

import pytest

from orchestrator.policy.model import Action, Observation, ProblemSpec
from orchestrator.policy.orch import AGED_RUN_OVERHEADS, AGED_SPARE_BREAK_EVENS, OrchPolicy
from orchestrator.policy.simulator import SimResult, simulate
from tests.policy._helpers import zones

CYCLE = "1" * 20 + "0" * 5
HIST0 = CYCLE * 8 + "1" * 20
HIST1 = CYCLE * 8 + "0" * 20
# In the job: zone 0's run goes on for 3 h, then an outage to the end; zone 1 comes back for one tick just
# as zone 0 goes (a run of 0.1 h), then again from 3.2 h for 5 h.
JOB0 = "1" * 30 + "0" * 100
JOB1 = "0" * 30 + "1" + "0" + "1" * 50
SPEC = ProblemSpec(work_h=4, deadline_h=40, overhead_h=0.1, spot_price=0.3)


def run(aged_gate: bool) -> SimResult:
    return simulate(SPEC, zones(HIST0 + JOB0, HIST1 + JOB1, gap_s=360), OrchPolicy(aged_gate=aged_gate),
                    len(HIST0), keep_log=True)


def actions(result: SimResult) -> list[str]:
    return [r.action for r in result.log]


def test_with_slack_far_to_spare_a_hop_waits_for_a_run_that_has_lasted_two_overheads() -> None:
    assert AGED_RUN_OVERHEADS * SPEC.overhead_h == pytest.approx(0.2)
    assert AGED_SPARE_BREAK_EVENS * SPEC.overhead_h / (1 - SPEC.spot_price) == pytest.approx(2.857, abs=1e-3)
    on, off = run(True), run(False)
    # Both: spot in zone 0 from t0 (its run 2 h old), overhead at t0, 2.9 h of work at t1-t29; 30 ticks
    # at 0.03: 0.9. Zone 0 is preempted at t30 (3 h in, 1.1 h of work left, far ahead of UP's line 0.3 h).
    # With the gate: zone 1's run is one tick old at t30 and ends at t31: the job waits t30-t32 (at t32 the
    # new run is again one tick old), and launches zone 1 at t33 (two ticks old): overhead at t33, the 1.1 h
    # at t34-t44; 12 ticks at 0.03: 0.36. Total 1.26, done at 4.5 h.
    assert actions(on) == ["spot[0]"] * 30 + ["idle"] * 3 + ["spot[1]"] * 12
    assert on.cost == pytest.approx(42 * 0.1 * 0.3) and on.finish_h == pytest.approx(4.5)
    assert on.launches == 2
    # Without it: zone 1 at t30 (its overhead, billed 0.03, no progress), preempted at t31 (idle), again at
    # t32: overhead, the 1.1 h at t33-t43. Total 0.9 + 0.03 + 0.36 = 1.29, done at 4.4 h: one launch more,
    # k x d = 0.03 dearer.
    assert actions(off) == ["spot[0]"] * 30 + ["spot[1]", "idle"] + ["spot[1]"] * 12
    assert off.cost == pytest.approx(43 * 0.1 * 0.3) and off.finish_h == pytest.approx(4.4)
    assert off.launches == 3
    assert on.met and off.met


class Recording(OrchPolicy):
    """orch, noting the shortfall X it sees at each tick (for the cases' premises)."""

    def reset(self, spec: ProblemSpec, zones: int) -> None:
        super().reset(spec, zones)
        self.shortfalls: list[float | None] = []

    def decide(self, obs: Observation) -> Action:
        self.shortfalls.append(self.shortfall(obs))
        return super().decide(obs)


def test_without_that_much_slack_the_hop_is_at_once() -> None:
    # D = 7 h: X at the hop (t30) is 1.1 - 0.74 x 4 = -1.87 h: below -4 d/(1-k) = -0.57 h (the odds filter's
    # gate: it passes zone 1, all of whose ended runs outlast the break-even) but not below -2.86 h: the aged
    # gate does not fire, and the hop is at once, as without it (cost 1.29 as above, done at 4.4 h).
    spec = ProblemSpec(work_h=7 - 3, deadline_h=7, overhead_h=0.1, spot_price=0.3)
    zs = zones(HIST0 + JOB0, HIST1 + JOB1, gap_s=360)
    policy = Recording(aged_gate=True)
    on = simulate(spec, zs, policy, len(HIST0), keep_log=True)
    off = simulate(spec, zs, OrchPolicy(aged_gate=False), len(HIST0), keep_log=True)
    x = policy.shortfalls[30]
    assert x is not None and -20 * 0.1 / 0.7 < x < -4 * 0.1 / 0.7
    assert x == pytest.approx(-1.87, abs=0.01)
    assert actions(on) == actions(off) == ["spot[0]"] * 30 + ["spot[1]", "idle"] + ["spot[1]"] * 12
    assert on.cost == off.cost == pytest.approx(43 * 0.1 * 0.3) and on.finish_h == pytest.approx(4.4)
