"""Each policy's defining behaviour, deadlines on adversarial traces, and the optimum as the floor."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.policy.model import ON_DEMAND, WAIT, Mode, ProblemSpec, spot
from orchestrator.policy.optimum import optimum
from orchestrator.policy.orch import OrchPolicy as ForecastPolicy
from orchestrator.policy.orch_v1 import OrchV1Policy as OrchPolicy
from orchestrator.policy.policies import GreedyPolicy, OnDemandPolicy, UniformProgressPolicy
from orchestrator.policy.registry import POLICY_NAMES, UnknownPolicyError, make_policy
from orchestrator.policy.simulator import simulate
from tests.policy._helpers import Scripted, zones

ALL = [OnDemandPolicy, GreedyPolicy, UniformProgressPolicy, OrchPolicy, ForecastPolicy]


def modes(spec: ProblemSpec, zs, policy) -> str:  # type: ignore[no-untyped-def]
    r = simulate(spec, zs, policy, keep_log=True)
    assert r.log is not None
    return "".join({"idle": ".", "on-demand": "D"}.get(t.action, "s") for t in r.log)


def test_on_demand_runs_on_demand_from_the_first_tick() -> None:
    spec = ProblemSpec(4, 8, 0.5)
    assert modes(spec, zones("11111111"), OnDemandPolicy()) == "DDDDD"


def test_greedy_waits_for_spot_then_the_safety_net_keeps_on_demand_to_the_end() -> None:
    # gap 1 h, C=4, D=8, d=0.5. No spot for 3 ticks: greedy waits; at tick 3, R=5 and ceil(C+2d)=5 >= 5: on-demand
    # (the Safety Net), kept even though spot comes back at tick 4.
    spec = ProblemSpec(4, 8, 0.5)
    assert modes(spec, zones("00001111"), GreedyPolicy()) == "...DDDDD"


def test_uniform_progress_goes_on_demand_when_behind_and_holds_it_through_the_hysteresis() -> None:
    # C=4, D=10 (rate 0.4), d=0.5, gap 1 h. t0: no spot, cp=0 = ep(0) -> wait. t1: cp=0 < ep(1)=0.4 -> OD.
    # t2: spot is back but cp=0.5 < ep(2+1)=1.2 -> stay OD (hysteresis). t3: cp=1.5 >= ep(4)=1.6? no -> OD.
    # t4: cp=2.5 >= ep(5)=2.0 -> spot.
    spec = ProblemSpec(4, 10, 0.5)
    assert modes(spec, zones("0011111111"), UniformProgressPolicy()).startswith(".DDDs")
    # Greedy on the same trace takes the spot at t2 straight away.
    assert modes(spec, zones("0011111111"), GreedyPolicy()).startswith("..s")


def test_uniform_progress_waits_when_ahead_of_the_line() -> None:
    # C=3, D=10 (rate 0.3): spot for three ticks gives cp=2.5 at t3, far above ep(3)=0.9 -> wait.
    spec = ProblemSpec(3, 10, 0.5)
    assert modes(spec, zones("1110000000"), UniformProgressPolicy()).startswith("sss.")


def test_orch_places_spot_where_uniform_progress_does() -> None:
    # orch keeps UP's zone choice (the cheapest available zone, the first on ties): a zone choice of its own
    # was cheaper on average but dearer on some public traces (docs/policy.md).
    spec = ProblemSpec(6, 20, 0.1)
    zs = zones("00" + "1" * 18, "10" + "1" * 18)
    r = simulate(spec, zs, OrchPolicy(), keep_log=True)
    up = simulate(spec, zs, UniformProgressPolicy(), keep_log=True)
    assert r.log is not None and up.log is not None
    assert [t.action for t in r.log] == [t.action for t in up.log]
    assert [t.action for t in r.log[:3]] == ["spot[1]", "idle", "spot[0]"]
    assert r.cost == up.cost


def test_orch_never_launches_into_a_zone_with_a_preemption_notice_when_the_overhead_fills_the_tick() -> None:
    # gap 0.25 h, d = 0.5 h: an instance that will be preempted at the next tick could make no progress.
    # Uniform Progress launches at t0 (billed 0.3 x 0.25 for nothing) and is idle at t1; orch waits at t0 and
    # is idle at t1 with the same work done: from there both do the same, orch 0.075 cheaper.
    spec = ProblemSpec(2, 10, 0.5)
    trace = "10" + "1" * 40
    r = simulate(spec, zones(trace, gap_s=900), OrchPolicy(), notice=True, keep_log=True)
    up = simulate(spec, zones(trace, gap_s=900), UniformProgressPolicy(), notice=True, keep_log=True)
    assert r.log is not None and r.log[0].action == "idle" and r.preemptions == 0
    assert up.preemptions == 1 and r.cost == pytest.approx(up.cost - 0.3 * 0.25)
    assert r.finish_h == up.finish_h
    # Without a notice orch cannot know: it does what UP does.
    plain = simulate(spec, zones(trace, gap_s=900), OrchPolicy(), keep_log=True)
    assert plain.preemptions == 1 and plain.cost == up.cost


@pytest.mark.parametrize("policy", ALL)
@pytest.mark.parametrize("trace", [
    "1" * 70 + "0" * 30,                 # spot vanishes for good shortly before the deadline
    "10" * 50,                           # flapping every tick
    "1100" * 25,                         # flapping every two ticks
    "0" * 100,                           # never any spot
    "0" * 60 + "1" * 40,                 # spot only once it is too late to rely on
    "1" * 40 + "0" * 20 + "1" * 40,
])
def test_every_policy_meets_the_deadline_on_adversarial_traces(policy: type, trace: str) -> None:
    spec = ProblemSpec(6, 9, 0.2)     # gap 0.1 h (360 s): 90 ticks to the deadline, overhead = 2 ticks
    r = simulate(spec, zones(trace, gap_s=360), policy())
    assert r.met, (policy.name, trace, r)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.text(alphabet="01", min_size=40, max_size=40), min_size=1, max_size=3),
    deadline=st.sampled_from([5.0, 6.0, 8.0]),
    overhead=st.sampled_from([0.25, 0.5]),
)
def test_every_policy_meets_deadlines_and_the_optimum_is_below_all_of_them(
        rows: list[str], deadline: float, overhead: float) -> None:
    spec = ProblemSpec(4.0, deadline, overhead, 0.3)
    zs = zones(*rows, gap_s=900)     # gap 0.25 h: the optimum's grid is exact
    opt = optimum(spec, zs, [0])[0]
    assert opt.exact and opt.cost is not None
    for policy in ALL:
        r = simulate(spec, zs, policy())
        assert r.met, policy.name
        assert opt.cost <= r.cost + 1e-9, policy.name


def test_optimum_equals_brute_force_over_every_schedule_of_a_tiny_problem() -> None:
    # 1 zone, 6 ticks of 1 h, C=3, D=6, d=0.5: try all 3^6 action sequences that are legal under the trace.
    spec = ProblemSpec(3, 6, 0.5, 0.3)
    trace = "110110"
    zs = zones(trace)
    best = float("inf")
    for seq in itertools.product((WAIT, ON_DEMAND, spot(0)), repeat=6):
        if any(a.mode is Mode.SPOT and trace[t] == "0" for t, a in enumerate(seq)):
            continue
        r = simulate(spec, zs, Scripted(seq))
        if r.met:
            best = min(best, r.cost)
    opt = optimum(spec, zs, [0])[0]
    assert opt.exact and opt.cost == pytest.approx(best)


def test_optimum_with_spot_everywhere_or_nowhere() -> None:
    spec = ProblemSpec(4, 8, 0.5, 0.3)
    assert optimum(spec, zones("1" * 8), [0])[0].cost == pytest.approx(0.3 * 4.5)
    assert optimum(spec, zones("0" * 8), [0])[0].cost == pytest.approx(4.5)
    # Several starts at once: each its own window.
    got = [o.cost for o in optimum(spec, zones("0" * 8 + "1" * 8), [0, 8])]
    assert got == [pytest.approx(4.5), pytest.approx(1.35)]


def test_optimum_with_a_coarse_grid_is_still_a_lower_bound() -> None:
    # gap 195 s, d = 720 s: the grid cannot hold d exactly; the result must stay <= what the policies pay.
    spec = ProblemSpec(2.0, 3.0, 0.2, 0.3)
    zs = zones("1101100111" * 8, gap_s=195)
    opt = optimum(spec, zs, [0], max_levels=50)[0]
    assert not opt.exact and opt.cost is not None
    assert all(opt.cost <= simulate(spec, zs, p()).cost + 1e-9 for p in ALL)


def test_registry_names_and_aliases() -> None:
    assert POLICY_NAMES == ("on-demand", "greedy", "uniform-progress", "orch")
    assert make_policy("UP").name == "uniform-progress"
    with pytest.raises(UnknownPolicyError, match="choose from"):
        make_policy("cheapest")
