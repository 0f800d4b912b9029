"""The replay's shortcuts change no result: the Observation builder, the policies' promises (``keeps_paid_spot``,
``keeps_on_demand``: the simulator does not ask then) and the optimum's in-place DP, each against the plain form
on seeded random traces (fixed seeds: the same cases every run)."""

from __future__ import annotations

import math
import random
from dataclasses import fields

import pytest

from orchestrator.policy.evaluate import start_ticks
from orchestrator.policy.model import ON_DEMAND, Action, Mode, Observation, ProblemSpec, ZoneStats, spot
from orchestrator.policy.observation import OBSERVATION_ARGS, new_observation
from orchestrator.policy.optimum import DEFAULT_MAX_LEVELS, optimum, waste_grid
from orchestrator.policy.policies import GreedyPolicy, OnDemandPolicy, UniformProgressPolicy
from orchestrator.policy.simulator import simulate, window_ticks
from orchestrator.policy.traces import Trace, ZoneSet

SPECS = [
    ProblemSpec(10, 15, 0.5, 0.3),
    ProblemSpec(10, 12, 0.2, 0.3),
    ProblemSpec(6, 12, 0.75, 0.5),
    ProblemSpec(8, 11, 0.0, 0.3),
    ProblemSpec(5, 9, 0.35, 0.2),
]


def random_set(rng: random.Random, n_zones: int, ticks: int, gap_s: float, priced: bool) -> ZoneSet:
    """Zones whose availability alternates in runs of random length (1 to 12 ticks up, 1 to 6 down)."""
    traces = []
    for z in range(n_zones):
        row: list[bool] = []
        up = rng.random() < 0.5
        while len(row) < ticks:
            row += [up] * rng.randint(1, 12 if up else 6)
            up = not up
        prices = tuple(round(rng.uniform(0.1, 0.6), 3) for _ in range(ticks)) if priced else None
        traces.append(Trace(f"z{z}", gap_s, tuple(row[:ticks]), prices))
    return ZoneSet(f"random-{n_zones}", tuple(traces))


def cases(seed: int, count: int) -> list[tuple[ProblemSpec, ZoneSet]]:
    rng = random.Random(seed)
    return [
        (
            rng.choice(SPECS),
            random_set(
                rng, rng.randint(1, 3), rng.randint(20, 90), rng.choice([1800.0, 1200.0, 2520.0]), rng.random() < 0.3
            ),
        )
        for _ in range(count)
    ]


def test_the_observation_builder_makes_the_dataclass_s_own_value() -> None:
    stats = ZoneStats()
    args = (
        3,
        1.5,
        0.5,
        SPECS[0],
        0.75,
        Mode.SPOT,
        1,
        0.25,
        (True, False),
        (0.3, 0.4),
        (False, True),
        True,
        (stats, stats),
        stats,
        2.5,
    )
    built = new_observation(*args)
    plain = Observation(**dict(zip(OBSERVATION_ARGS, args, strict=True)))
    assert type(built) is Observation and built == plain
    assert all(getattr(built, f.name) is getattr(plain, f.name) for f in fields(Observation))
    with pytest.raises(AttributeError):
        built.tick = 4  # type: ignore[misc]   # still frozen


@pytest.mark.parametrize("policy", [OnDemandPolicy, GreedyPolicy, UniformProgressPolicy])
def test_the_reference_policies_keep_what_they_promise(policy: type) -> None:
    """Asked at every tick (a subclass does not inherit the promises), each answers as it promised."""
    promised = vars(policy)
    broken: list[str] = []

    class Asked(policy):  # type: ignore[misc, valid-type]
        def decide(self, obs: Observation) -> Action:
            action = super().decide(obs)
            if (
                promised.get("keeps_paid_spot")
                and obs.mode is Mode.SPOT
                and obs.overhead_left_h == 0.0
                and action != spot(obs.zone)
            ):  # type: ignore[arg-type]
                broken.append(f"{obs}: {action}")
            if promised.get("keeps_on_demand") and obs.mode is Mode.ON_DEMAND and action != ON_DEMAND:
                broken.append(f"{obs}: {action}")
            return action

    asked = 0
    for spec, zs in cases(33, 60):
        for notice in (False, True):
            for s in start_ticks(zs, spec, 3):
                simulate(spec, zs, Asked(), s, notice=notice)
                asked += 1
    assert asked > 100 and not broken, broken[:3]


@pytest.mark.parametrize("policy", [OnDemandPolicy, GreedyPolicy, UniformProgressPolicy])
def test_a_replay_that_takes_the_promised_answers_equals_one_that_asks(policy: type) -> None:
    class Asked(policy):  # type: ignore[misc, valid-type]
        pass  # the promises are read from the policy's own class: this one is asked at every tick

    assert vars(policy).get("keeps_paid_spot") or vars(policy).get("keeps_on_demand")
    compared = 0
    for spec, zs in cases(34, 60):
        for notice in (False, True):
            for s in start_ticks(zs, spec, 3):
                fast = simulate(spec, zs, policy(), s, notice=notice, keep_log=True)
                slow = simulate(spec, zs, Asked(), s, notice=notice, keep_log=True)
                assert fast == slow
                compared += 1
    assert compared > 100


def plain_optimum(spec: ProblemSpec, zones: ZoneSet, starts: list[int]) -> list[float | None]:
    """The optimum's DP in its plain form (a new array per step), as optimum.py had it before its buffers."""
    import numpy as np

    gap = zones.gap_h
    horizon = window_ticks(spec, gap)
    n_z, b_n = len(zones.zones), len(starts)
    m, q = waste_grid(spec, gap, DEFAULT_MAX_LEVELS)
    w_max = math.floor((spec.deadline_h - spec.work_h) / q + 1e-9)
    ovh = math.floor(spec.overhead_h / q + 1e-9)
    c = spec.work_h
    n = zones.ticks
    avail_full = np.zeros((n_z, n + horizon), dtype=bool)
    price_full = np.full((n_z, n + horizon), spec.spot_price, dtype=np.float64)
    for z, tr in enumerate(zones.zones):
        avail_full[z, :n] = tr.available
        if tr.prices is not None:
            price_full[z, :n] = tr.prices
    idx = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(horizon)[None, :]
    avail = avail_full[:, idx].transpose(1, 0, 2)
    price = price_full[:, idx].transpose(1, 0, 2) * gap
    inf, levels = np.inf, w_max + 1
    idle = np.full((b_n, levels), inf)
    idle[:, 0] = 0.0
    od = np.full((b_n, levels), inf)
    sp = np.full((b_n, n_z, levels), inf)
    best = np.full(b_n, inf)

    def shifted(x: np.ndarray, s: int) -> np.ndarray:
        out = np.full_like(x, inf)
        if s < levels:
            out[..., s:] = x[..., : levels - s]
        return out

    for t in range(horizon):
        any_state = np.minimum(np.minimum(idle, od), sp.min(axis=1))
        start, new_idle = shifted(any_state, ovh), shifted(any_state, m)
        od_base = np.minimum(od, start)
        sp_base = np.where(avail[:, :, t, None], np.minimum(sp, start[:, None, :]), inf)
        w_done = math.floor(((t + 1) * gap - c) / q + 1e-9)
        if w_done >= 0:
            hi = min(w_done, w_max) + 1
            used = np.clip(c + np.arange(hi) * q - t * gap, 0.0, gap)
            fin_od = (od_base[:, :hi] + used[None, :]).min(axis=1)
            fin_sp = (sp_base[:, :, :hi] + (price[:, :, t, None] / gap) * used[None, None, :]).min(axis=(1, 2))
            best = np.minimum(best, np.minimum(fin_od, fin_sp))
            od_base[:, :hi] = inf
            sp_base[:, :, :hi] = inf
        od, sp, idle = od_base + gap, sp_base + price[:, :, t, None], new_idle
        if (t + 1) * gap >= spec.deadline_h - 1e-9:
            break
    return [float(v) / spec.on_demand_cost if np.isfinite(v) else None for v in best]


def test_the_optimum_equals_its_plain_form_to_the_last_bit() -> None:
    compared = 0
    for spec, zs in cases(35, 40):
        starts = start_ticks(zs, spec, 4)
        assert [r.normalized_cost for r in optimum(spec, zs, starts)] == plain_optimum(spec, zs, starts)
        compared += len(starts)
    assert compared > 80


def test_one_zone_s_any_zone_is_what_a_set_with_a_zone_that_never_has_spot_keeps_apart() -> None:
    # A one-zone set shows the zone's own record as any_zone; the same zone beside a zone that never has spot
    # keeps "some zone has spot" apart, updated tick by tick: the two records must agree at every tick.
    seen: dict[str, list[tuple[object, ...]]] = {"one": [], "two": []}

    class Recording(UniformProgressPolicy):
        def __init__(self, key: str) -> None:
            self.key = key

        def decide(self, obs: Observation) -> Action:
            assert obs.any_zone is not None
            a = obs.any_zone
            seen[self.key].append((a.seen_h, a.up_h, a.available, a.streak_h, tuple(a.up_runs), tuple(a.down_runs),
                                   a.runs_recorded, a.ended_up_runs, a.ended_up_h))
            return super().decide(obs)

    compared = 0
    for spec, zs in cases(36, 30):
        one = ZoneSet("one", (zs.zones[0],))
        never = Trace("never", zs.zones[0].gap_seconds, (False,) * len(zs.zones[0].available), None)
        two = ZoneSet("two", (zs.zones[0], never))
        for s in start_ticks(one, spec, 3):
            seen["one"].clear()
            seen["two"].clear()
            simulate(spec, one, Recording("one"), s)
            simulate(spec, two, Recording("two"), s)
            assert seen["one"] == seen["two"] and seen["one"]
            compared += 1
    assert compared > 40
