"""orch v3 as a whole: the same constants on every trace set, every rule's switch, and the deadline under a
fixed seed on long-tailed zones (the rules: test_orch_od_odds.py, test_orch_early.py, test_orch_odds.py,
test_orch_set_rules.py, test_orch_v2.py)."""

from __future__ import annotations

import inspect
import math
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from orchestrator.policy import forecast, mdp, mdp_model, orch, orch_forecasts
from orchestrator.policy.hybrid import HybridPolicy
from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.orch import OrchPolicy
from orchestrator.policy.simulator import simulate
from orchestrator.policy.traces import Trace, ZoneSet, discover
from tests.bench import bench_policy
from tests.bench.synthetic_traces import generate
from tests.policy._helpers import zones


def constants() -> dict[str, object]:
    """Every constant orch decides by: the module constants of orch.py, orch_forecasts.py and forecast.py, and
    of mdp.py and mdp_model.py (the plan orch decides single zones by, v3.3, and hands a zone set at a large
    overhead, ``set_plan``)."""
    return {
        f"{m.__name__}.{k}": v
        for m in (orch, orch_forecasts, forecast, mdp, mdp_model)
        for k, v in vars(m).items()
        if k.isupper() and isinstance(v, (int, float))
    }


def public(policy: object, prefix: str) -> dict[str, object]:
    return {f"{prefix}.{k}": v for k, v in vars(policy).items() if not k.startswith("_")}


def fingerprint(policy: HybridPolicy) -> tuple[tuple[str, object], ...]:
    """The policy's switches and numbers, the rules' and the MDP's (not their per-job caches), the decider
    this job got and the module constants."""
    own = {**public(policy, "orch"), **public(policy._rules, "rules"), "active": type(policy._active).__name__}
    if policy._mdp is not None:
        own.update(public(policy._mdp, "mdp"))
    return tuple(sorted({**own, **constants()}.items()))


def test_the_bench_runs_orch_with_the_same_constants_on_public_shaped_and_synthetic_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bench's two kinds of runs (a trace directory; the synthetic generator), each on its own traces:
    # every orch the bench builds must carry the defaults, whatever it replays.
    seen: list[tuple[tuple[str, object], ...]] = []
    reset = HybridPolicy.reset

    def recording(self: HybridPolicy, spec: ProblemSpec, n: int) -> None:
        reset(self, spec, n)
        seen.append(fingerprint(self))

    monkeypatch.setattr(HybridPolicy, "reset", recording)
    monkeypatch.setattr(bench_policy, "SETTINGS", [(60.0, 0.5)])
    public_like = ZoneSet(
        "public-like",
        (
            Trace("a", 600.0, tuple((i // 7) % 3 != 0 for i in range(800))),
            Trace("b", 600.0, tuple((i // 5) % 4 != 1 for i in range(800))),
        ),
    )
    bench_policy.run([public_like, ZoneSet("a", public_like.zones[:1])], 2, 1, "orch")
    public_runs = len(seen)
    generate(tmp_path, seed=7, days=3.0)
    bench_policy.run(discover([tmp_path / "calm"]), 1, 1, "orch")
    assert public_runs > 0 and len(seen) > public_runs
    # One fingerprint for single zones (the MDP), one for zone sets (the rules), the same on both trace sets.
    assert set(seen[:public_runs]) == set(seen[public_runs:])
    defaults = []
    for n in (1, 2):
        fresh = HybridPolicy()
        reset(fresh, ProblemSpec(work_h=1, deadline_h=2, overhead_h=0.1, spot_price=0.3), n)
        defaults.append(fingerprint(fresh))
    assert set(seen) == set(defaults) and len(set(defaults)) == 2


def test_every_rule_has_a_switch_and_orch_runs_with_each_off() -> None:
    # Each rule measured in docs/policy.md is a keyword of OrchPolicy whose default is orch.
    params = inspect.signature(OrchPolicy).parameters
    rules = [
        "cover_longest",
        "lifetime_filter",
        "stable_zone",
        "set_lifetime",
        "tie_life",
        "odds_filter",
        "early_wait",
        "od_odds",
        "cover_pays",
        "set_plan",
    ]
    assert all(params[r].default is True for r in rules)
    spec = ProblemSpec(work_h=2, deadline_h=6, overhead_h=0.5, spot_price=0.3)
    zs = zones("1100" * 30 + "1010011100111", "0110" * 30 + "0111100011110", gap_s=1800)
    for rule in rules:
        assert simulate(spec, zs, OrchPolicy(**{rule: False}), 120).met, rule


@st.composite
def long_tailed(draw: st.DrawFn) -> tuple[ProblemSpec, ZoneSet, int, bool]:
    """Lognormal runs (medians 5 min to 10 h, sigma up to 1.5: flappy to calm), overheads up to 1 h, 1-3
    zones, slack from a few overheads to a window twice the work."""
    gap_s = draw(st.sampled_from([60.0, 300.0, 600.0]))
    gap_h = gap_s / 3600
    work = draw(st.floats(1.0, 8.0))
    overhead = draw(st.floats(0.05, 1.0))
    slack = draw(st.floats(2 * overhead + gap_h, work + 4 * overhead))
    spec = ProblemSpec(work_h=work, deadline_h=work + slack, overhead_h=overhead, spot_price=draw(st.floats(0.1, 0.7)))
    history = math.ceil(24 / gap_h)
    ticks = history + math.ceil(spec.deadline_h / gap_h) + 1
    traces = []
    for z in range(draw(st.integers(1, 3))):
        up_med, down_med = draw(st.floats(5 / 60, 10.0)), draw(st.floats(2 / 60, 3.0))
        sigma = draw(st.floats(0.3, 1.5))
        rng = random.Random(draw(st.integers(0, 2**16)))
        data: list[bool] = []
        state = rng.random() < 0.7
        while len(data) < ticks:
            med = up_med if state else down_med
            data.extend([state] * max(1, round(med * math.exp(sigma * rng.gauss(0, 1)) / gap_h)))
            state = not state
        traces.append(Trace(f"z{z}", gap_s, tuple(data[:ticks])))
    return spec, ZoneSet("lognormal", tuple(traces)), history, draw(st.booleans())


@seed(33)
@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_tailed())
def test_orch_meets_every_deadline_on_long_tailed_zones(case: tuple[ProblemSpec, ZoneSet, int, bool]) -> None:
    spec, zs, start, notice = case
    result = simulate(spec, zs, HybridPolicy(), start, notice=notice)
    assert result.met, (spec, start, notice)
