"""orch v3.3 (orchestrator/policy/hybrid.py): the MDP's plan for one zone, orch's rules for a zone set. Hand-made
traces, hand-computed costs.

Conventions as in test_mdp.py: a tick pays what is left of the overhead first, then makes progress; k = 0.3,
on-demand 1, costs in on-demand hours. The trace: gap 0.25 h; two weeks (20 cycles) of 10 h of spot and 6.5 h
out, then the job's window: 7 h out, then spot to the end. C = 6 h, D = 14 h (slack 8 h), d = 0.2 h.
"""

from __future__ import annotations

import pytest

from orchestrator.policy.hybrid import HybridPolicy
from orchestrator.policy.mdp import MdpPolicy
from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.orch import OrchPolicy
from orchestrator.policy.registry import make_policy
from orchestrator.policy.simulator import SimResult, simulate
from tests.policy._helpers import action_letters, zones

HISTORY = ("1" * 40 + "0" * 26) * 20
JOB = "0" * 28 + "1" * 60
SPEC = ProblemSpec(work_h=6, deadline_h=14, overhead_h=0.2, spot_price=0.3)


def run(policy: object, n_zones: int = 1) -> SimResult:
    return simulate(SPEC, zones(*[HISTORY + JOB] * n_zones, gap_s=900), policy, len(HISTORY), keep_log=True)


def test_the_mdp_waits_the_outage_out() -> None:
    # The history's outages last 6.5 h: the plan waits (28 ticks, 7 h; the slack 8 h -> 1 h, above the Safety
    # Net's 2d + gap = 0.65 h) and rides spot from 7 h: one launch, 0.2 + 6 h at 0.3 = 1.86.
    res = run(MdpPolicy())
    assert action_letters(res) == "i" * 28 + "s" * 25
    assert res.cost == pytest.approx(0.3 * 6.2) and res.met


def test_orch_takes_the_mdp_on_one_zone_and_the_rules_on_a_zone_set() -> None:
    # orch's rules on this trace: idle 4 h, on-demand from tick 16 for 3 h (0.2 + 2.8 h of work, 3.0), then
    # spot from 7 h: 0.2 + 3.2 h at 0.3 = 1.02; 4.02.
    rules = 3.0 + 0.3 * 3.4
    assert run(OrchPolicy()).cost == pytest.approx(rules)
    # One zone: orch is orch-mdp (1.86, above); two zones with the same trace: orch is orch's rules (4.02).
    assert run(make_policy("orch")).cost == pytest.approx(0.3 * 6.2)
    assert run(make_policy("orch"), 2).cost == pytest.approx(rules)
    assert run(make_policy("orch-mdp")).cost == pytest.approx(0.3 * 6.2)
    # The switch off (orch-rules): the rules on one zone too.
    assert run(make_policy("orch-rules")).cost == pytest.approx(rules)
    assert run(HybridPolicy(mdp_singles=False)).cost == pytest.approx(rules)


def test_one_policy_object_switches_decider_per_job() -> None:
    policy = HybridPolicy()
    assert run(policy, 2).cost == pytest.approx(3.0 + 0.3 * 3.4)
    assert run(policy, 1).cost == pytest.approx(0.3 * 6.2)
    assert run(policy, 2).cost == pytest.approx(3.0 + 0.3 * 3.4)


def test_names() -> None:
    assert make_policy("orch").name == "orch"
    assert make_policy("orch-rules").name == "orch-rules"
    assert isinstance(make_policy("orch"), HybridPolicy)
