"""orch v3.5: orch-mdp reads its plan at the nearest slack step (``slack_nearest``), not the slack rounded down.
Hand-made trace, hand-computed costs.

Conventions as in test_mdp.py: a tick pays what is left of the overhead first, then makes progress; k = 0.3,
on-demand 1, costs in on-demand hours. The trace: gap 5 min; two weeks (14 cycles) of 2 h of spot and 2 h
out, then the job's window: 7 ticks of spot, 4 out, then spot to the end. C = 3 h, D = 5 h (slack 2 h),
d = 0.5 h (6 ticks); the plan's step is 0.25 h (3 ticks).
"""

from __future__ import annotations

import inspect

import pytest

from orchestrator.policy.hybrid import HybridPolicy
from orchestrator.policy.mdp import MdpPolicy
from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.simulator import SimResult, simulate
from tests.policy._helpers import action_letters, zones

HISTORY = ("1" * 24 + "0" * 24) * 14
JOB = "1" * 7 + "0" * 4 + "1" * 50
SPEC = ProblemSpec(work_h=3, deadline_h=5, overhead_h=0.5, spot_price=0.3)
TICK = 1 / 12


def run(policy: object) -> SimResult:
    return simulate(SPEC, zones(HISTORY + JOB, gap_s=300), policy, len(HISTORY), keep_log=True)


def test_slack_rounded_down_sees_the_safety_net_where_there_is_none() -> None:
    # Spot for 7 ticks (6 of overhead, 1 of work), preempted, 4 ticks idle. At tick 11 spot is back: 35 ticks of
    # work left, 49 ticks of time: slack 14 ticks = 1.1667 h, above the Safety Net's 2d + a tick (13 ticks), so
    # the net does not force on-demand. Rounded down to the plan's grid the slack is 4 steps = 2d, the plan's own
    # net: on-demand for the rest (6 ticks of overhead + 35 of work). Cost 7 ticks at 0.3 + 41 ticks at 1.
    res = run(MdpPolicy(slack_nearest=False))
    assert action_letters(res) == "s" * 7 + "i" * 4 + "o" * 41
    assert res.cost == pytest.approx(0.3 * 7 * TICK + 41 * TICK) and res.met


def test_slack_at_the_nearest_step_relaunches_spot() -> None:
    # The nearest step is 5 (1.25 h): the plan relaunches spot and rides it to the end (6 ticks of overhead,
    # 35 of work). Cost: 48 ticks at 0.3 = 1.2; finished at tick 52 (4.33 h), within the 5 h deadline.
    for policy in (MdpPolicy(), HybridPolicy()):
        res = run(policy)
        assert action_letters(res) == "s" * 7 + "i" * 4 + "s" * 41
        assert res.cost == pytest.approx(0.3 * 48 * TICK) and res.met


def test_the_switch_is_a_keyword_whose_default_is_orch() -> None:
    assert inspect.signature(MdpPolicy).parameters["slack_nearest"].default is True
