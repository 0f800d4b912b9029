"""orch never costs more than Uniform Progress: its two rules by hand, and the claim itself on random traces.

The argument is in orchestrator/policy/orch.py; these tests would fail if either rule deviated from Uniform
Progress where the deviation could cost more, or if orch left UP's state without a cheaper way to finish.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.orch_v1 import OrchV1Policy as OrchPolicy
from orchestrator.policy.policies import UniformProgressPolicy
from orchestrator.policy.simulator import simulate
from tests.policy._helpers import zones


def both(spec: ProblemSpec, *rows: str, gap_s: float = 3600.0, notice: bool = False, prices=None):  # type: ignore[no-untyped-def]
    zs = zones(*rows, gap_s=gap_s, prices=prices)
    return (simulate(spec, zs, OrchPolicy(), notice=notice, keep_log=True),
            simulate(spec, zs, UniformProgressPolicy(), notice=notice, keep_log=True))


def actions(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [t.action for t in result.log]


def test_rule_1_stops_a_spot_instance_whose_overhead_fills_the_tick_before_its_preemption() -> None:
    # gap 0.25 h, d = 0.5 h, k = 0.3. Spot at t0 and t1, gone at t2 (the notice comes at t1). Both launch at t0
    # (0.25 h of overhead paid). At t1 the instance still has 0.25 h of overhead, the whole tick: UP keeps it,
    # pays 0.075 for nothing and is preempted at t2; orch stops it and is idle at t2 with the same work done.
    spec = ProblemSpec(2, 10, 0.5, 0.3)
    trace = "110" + "1" * 40
    orch, up = both(spec, trace, gap_s=900, notice=True)
    assert actions(orch)[:2] == ["spot[0]", "idle"] and actions(up)[:2] == ["spot[0]", "spot[0]"]
    assert actions(orch)[2:] == actions(up)[2:] and up.preemptions == 1
    assert orch.preemptions == 0
    assert orch.cost == pytest.approx(up.cost - 0.3 * 0.25)
    assert orch.finish_h == pytest.approx(up.finish_h)


def test_rule_1_keeps_an_instance_that_can_still_make_progress_in_the_tick() -> None:
    # Same trace, d = 0.3 h: at t1 only 0.05 h of overhead is left, so the tick makes 0.2 h of progress before
    # the preemption. That is worth having: orch keeps the instance, as UP does.
    spec = ProblemSpec(2, 10, 0.3, 0.3)
    orch, up = both(spec, "110" + "1" * 40, gap_s=900, notice=True)
    assert actions(orch) == actions(up) and orch.cost == up.cost


def test_rule_2_finishes_on_on_demand_when_spot_cannot_be_cheaper() -> None:
    # C=3.6, D=10 (rate 0.36), d=0.5, k=0.3, gap 1 h; spot only from t5.
    # t0: cp 0 = ep(0), no spot -> wait. t1: behind -> on-demand (0.5 overhead + 0.5 work). t2-t4: no spot ->
    # on-demand (done 3.5). t5: spot is back and cp 3.5 >= ep(5 + 2d) = 2.16: UP moves to spot, paying
    # 0.3 x (0.5 + 0.1) = 0.18 for the last 0.1 h of work; orch stays: 0.1 on on-demand.
    spec = ProblemSpec(3.6, 10, 0.5, 0.3)
    orch, up = both(spec, "00000" + "1" * 6)
    assert actions(up) == ["idle", "on-demand", "on-demand", "on-demand", "on-demand", "spot[0]"]
    assert actions(orch) == ["idle", "on-demand", "on-demand", "on-demand", "on-demand", "on-demand"]
    assert up.cost == pytest.approx(4.18) and orch.cost == pytest.approx(4.1)
    assert orch.finish_h == pytest.approx(5.1) and up.finish_h == pytest.approx(5.6)


def test_rule_2_leaves_on_demand_when_spot_can_be_cheaper() -> None:
    # As above with C=3.9: 0.4 h left at t5; spot costs 0.3 x 0.9 = 0.27 < 0.4 if never preempted: orch goes
    # to spot with UP.
    spec = ProblemSpec(3.9, 10, 0.5, 0.3)
    orch, up = both(spec, "00000" + "1" * 6)
    assert actions(orch) == actions(up) and actions(up)[5] == "spot[0]" and orch.cost == up.cost


def test_rule_2_counts_only_the_cheapest_spot_price_seen() -> None:
    # Two zones at constant prices 0.1 and 0.6; UP leaves on-demand for the cheap zone. 0.1 x (0.5 + 0.1) = 0.06
    # < 0.1: the cheap zone is cheaper than finishing on on-demand, and orch must not compare with 0.6.
    spec = ProblemSpec(3.6, 10, 0.5, 0.3)
    orch, up = both(spec, "00000" + "1" * 6, "00000" + "1" * 6, prices=[[0.1] * 11, [0.6] * 11])
    assert actions(up)[5] == "spot[0]" and actions(orch) == actions(up) and orch.cost == up.cost


@settings(max_examples=250, deadline=None)
@given(
    rows=st.lists(st.text(alphabet="01", min_size=60, max_size=60), min_size=1, max_size=3),
    work=st.sampled_from([2.0, 3.0, 3.6, 4.0]),
    slack=st.sampled_from([1.0, 2.0, 4.0, 8.0]),
    overhead=st.sampled_from([0.1, 0.25, 0.5, 0.75]),
    gap_s=st.sampled_from([360.0, 900.0, 1800.0]),
    notice=st.booleans(),
    price_levels=st.lists(st.sampled_from([0.1, 0.3, 0.6]), min_size=3, max_size=3),
)
def test_orch_never_costs_more_than_uniform_progress_and_meets_every_deadline(
        rows: list[str], work: float, slack: float, overhead: float, gap_s: float, notice: bool,
        price_levels: list[float]) -> None:
    spec = ProblemSpec(work, work + slack, overhead, 0.3)
    prices = [[price_levels[i]] * len(row) for i, row in enumerate(rows)]
    orch, up = both(spec, *rows, gap_s=gap_s, notice=notice, prices=prices)
    assert up.met and orch.met
    assert orch.cost <= up.cost + 1e-9, (actions(orch), actions(up))
