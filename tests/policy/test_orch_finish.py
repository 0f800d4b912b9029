"""orch v3.4's on-demand finish (``finish_on_demand``, orchestrator/policy/hybrid.py): a job on on-demand whose
work left costs no more there than spot could even never preempted stays on on-demand to its end, whichever
decider has the job. Hand-made trace, hand-computed costs.

Conventions as in test_mdp.py: a tick pays what is left of the overhead first, then makes progress; k = 0.3,
on-demand 1, costs in on-demand hours. The trace: gap 5 min; two weeks (14 cycles) of 2 h of spot and 2 h
out, then the job's window: 42 ticks (3 h 30 min) out, then spot. C = 3 h, D = 5 h (slack 2 h), d = 0.5 h.
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
JOB = "0" * 42 + "1" * 11 + "0" * 9 + "1" + "0" * 6 + "1" * 4
SPEC = ProblemSpec(work_h=3, deadline_h=5, overhead_h=0.5, spot_price=0.3)
TICK = 1 / 12


def run(policy: object) -> SimResult:
    return simulate(SPEC, zones(HISTORY + JOB, gap_s=300), policy, len(HISTORY), keep_log=True)


def test_the_plan_leaves_on_demand_for_spot_with_two_ticks_of_work_left() -> None:
    # The plan: idle two ticks, on-demand from tick 2 (6 ticks of overhead, then work). At tick 42 spot comes
    # back with 2 ticks of work left (34 of 36 done): o + r = 1/6 h <= k (d + r) = 0.3 x 2/3 = 0.2. The plan's
    # grid bills whole 15-minute steps (the 2 ticks as 3), so it takes spot: 6 ticks of overhead and 2 of work
    # at 0.3. Cost: 40 ticks on-demand + 8 at 0.3.
    for policy in (MdpPolicy(), HybridPolicy(finish_on_demand=False)):
        res = run(policy)
        assert action_letters(res) == "ii" + "o" * 40 + "s" * 8
        assert res.cost == pytest.approx(40 * TICK + 0.3 * 8 * TICK) and res.met


def test_orch_finishes_on_on_demand() -> None:
    # The rule: stay on on-demand: 42 ticks (0.5 h of overhead, then 3 h of work) = 3.5, less than the
    # plan's 3.5333 (the spot session's own overhead, 0.5 h at 0.3 = 0.15, is more than the 1/6 h it saves).
    res = run(HybridPolicy())
    assert action_letters(res) == "ii" + "o" * 42
    assert res.cost == pytest.approx(3.5) and res.met


def test_the_switch_is_a_keyword_whose_default_is_orch() -> None:
    assert inspect.signature(HybridPolicy).parameters["finish_on_demand"].default is True
