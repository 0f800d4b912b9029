"""orch's zone sets at a large overhead are planned, not ruled (orchestrator/policy/orch.py, ``set_plan``): a
zone set whose overhead d is at least ``SET_PLAN_MIN_OVERHEAD_H`` hands every decision of the job to orch-mdp;
every other job (a single zone, or d below it) is decided by orch's rules exactly as with the switch off.

Hand-made traces, costs by hand (conventions as in test_orch_cover_pays.py: gap 0.5 h, d = 0.5 h, k = 0.3,
on-demand 1; a tick pays what is left of the overhead first, then makes progress): a spot tick costs
0.5 x 0.3 = 0.15, an on-demand tick 0.5.
"""

from __future__ import annotations

import pytest

from orchestrator.policy.mdp import MdpPolicy
from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.orch import SET_PLAN_MIN_OVERHEAD_H, OrchPolicy
from orchestrator.policy.simulator import SimResult, simulate
from tests.policy._helpers import zones

# Twelve hours of history in both zones: runs of 0.5 h of spot between outages of 1 h (flappy: a fresh run
# never lasts the break-even d / (1 - k) = 0.714 h), then the job's 8 h.
HIST = "001" * 8
Z0 = HIST + "1011111111101101"
Z1 = HIST + "0111010111000111"


def run(policy: OrchPolicy | MdpPolicy, overhead_h: float = 0.5, *rows: str) -> SimResult:
    spec = ProblemSpec(work_h=4, deadline_h=7, overhead_h=overhead_h, spot_price=0.3)
    return simulate(spec, zones(*(rows or (Z0, Z1)), gap_s=1800), policy, len(HIST), keep_log=True)


def actions(result: SimResult) -> list[str]:
    return [r.action for r in result.log]


def test_a_zone_set_at_half_hour_overheads_is_planned() -> None:
    # C = 4 h, D = 7 h. The job's ticks (z0 / z1): t0 1/0, t1 0/1, t2-t3 1/1, t4 1/0, t5 1/1, t6 1/0,
    # t7-t9 1/1, t10 1/0, t11 0/0, t12 1/0.
    planned, ruled = run(OrchPolicy()), run(OrchPolicy(set_plan=False))
    # The rules: spot z0 at t0 (its overhead); at t1 z0 is out and z1's fresh run is not predicted to last the
    # break-even, the shortfall is positive and the job behind UP's line: on-demand (its overhead); at t2 it
    # leaves on-demand for z1 (overhead), t3 0.5 h; z1 out at t4: z0 (overhead), t5-t10 3 h (3.5 h done);
    # z0 out at t11: on-demand t11 (overhead) and t12 (the last 0.5 h), done at 6.5 h. Spot t0, t2-t10:
    # 10 x 0.15 = 1.5; on-demand t1, t11, t12: 3 x 0.5 = 1.5. 3.0.
    assert actions(ruled) == ["spot[0]", "on-demand", "spot[1]", "spot[1]"] + ["spot[0]"] * 7 + ["on-demand"] * 2
    assert ruled.cost == pytest.approx(3.0) and ruled.finish_h == pytest.approx(6.5)
    # The plan: spot z0 at t0 (overhead), z1 at t1 (overhead), t2-t3 1 h; z1 out at t4: z0 (overhead), t5-t10
    # 3 h: 4 h done at 5.5 h, spot every tick: 11 x 0.15 = 1.65. No on-demand overhead is bought for a
    # one-tick outage of one zone while the other has spot.
    assert actions(planned) == ["spot[0]", "spot[1]", "spot[1]", "spot[1]"] + ["spot[0]"] * 7
    assert planned.cost == pytest.approx(1.65) and planned.finish_h == pytest.approx(5.5)
    assert planned.met and ruled.met
    # orch with the switch on is orch-mdp on that job, decision for decision.
    assert actions(run(MdpPolicy())) == actions(planned)


# A zone set on which orch-mdp and orch's rules decide differently at d = 0.2 h.
Y0 = HIST + "0101001111000110"
Y1 = HIST + "1000111001000110"


def test_below_the_overhead_and_on_a_single_zone_the_rules_decide_as_before() -> None:
    assert SET_PLAN_MIN_OVERHEAD_H == 0.5
    # A zone set at d = 0.2 h, and each zone alone at d = 0.5 h: orch-mdp would decide otherwise on each, the
    # switch changes nothing.
    for overhead, rows in ((0.2, (Y0, Y1)), (0.5, (Z0,)), (0.5, (Z1,))):
        on, off = run(OrchPolicy(), overhead, *rows), run(OrchPolicy(set_plan=False), overhead, *rows)
        assert actions(run(MdpPolicy(), overhead, *rows)) != actions(off), (overhead, len(rows))
        assert actions(on) == actions(off) and on.cost == off.cost, (overhead, len(rows))
