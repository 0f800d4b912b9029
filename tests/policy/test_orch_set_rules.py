"""orch's zone-set rules (orchestrator/policy/orch.py), pinned on hand-made traces with hand-computed figures.

Conventions as in test_orch_v2.py: gap g, overhead d, spot price k, on-demand 1; priors: a 2 h available run
and a 1 h outage, each worth one run, the prior's weight at age a being e^(-a / prior). The rules are
asked with ``set_plan=False``: at d >= 0.5 h orch otherwise hands a zone set to orch-mdp (test_orch_set_plan.py).
"""

from __future__ import annotations

import math

import pytest

from orchestrator.policy.model import ON_DEMAND, Mode, Observation, ProblemSpec, ZoneStats, spot
from orchestrator.policy.orch import OrchPolicy


def stats_of(pattern: str, gap_h: float) -> ZoneStats:
    stats = ZoneStats()
    for c in pattern:
        stats.observe(c == "1", gap_h)
    return stats


def on_demand_obs(history: tuple[ZoneStats, ...], any_zone: ZoneStats, spec: ProblemSpec) -> Observation:
    return Observation(tick=10, elapsed_h=10.0, gap_h=1.0, spec=spec, work_done_h=5.0, mode=Mode.ON_DEMAND,
                       zone=None, overhead_left_h=0.0, available=tuple(h.available for h in history),
                       spot_prices=(spec.spot_price,) * len(history), history=history, any_zone=any_zone)


def test_leaving_on_demand_in_a_zone_set_weighs_the_sets_spot_not_one_zones() -> None:
    # gap 1 h, d 0.5 h, k 0.3: a spot session is worth its overhead beyond d/(1-k) = 0.714 h; leaving
    # on-demand also risks a second on-demand overhead when spot ends, hence 2d/(1-k) = 1.429 h.
    # Two zones flap in turn, one tick each: zone 0 has spot on even ticks, zone 1 on odd ones, so the set
    # always has spot (one run of 101 h, none ended) while each zone's runs last 1 h. Now zone 0 has spot.
    z0 = stats_of("10" * 50 + "1", 1.0)
    z1 = stats_of("01" * 50 + "0", 1.0)
    any_zone = stats_of("1" * 101, 1.0)
    spec = ProblemSpec(work_h=40, deadline_h=60, overhead_h=0.5, spot_price=0.3)
    policy = OrchPolicy(set_plan=False)
    policy.reset(spec, 2)
    obs = on_demand_obs((z0, z1), any_zone, spec)
    # Zone 0's lifetime: this tick + E[X - 1 | X >= 1] over 50 runs of 1 h (0 each) and the prior (2 h, weight
    # w = e^-0.5): 1 + 2w / (50 + w) = 1.024 h; over its last 10 runs 1 + 2w / (10 + w) = 1.114 h, and the
    # cautious lifetime is the lower of the two.
    w = math.exp(-0.5)
    assert policy.lifetime(obs, 0) == pytest.approx(1 + 2 * w / (50 + w))
    assert policy.lifetime(obs, 0, cautious=True) == pytest.approx(1 + 2 * w / (50 + w))
    # The set's run has lasted 101 h, longer than any seen: about as long again, + this tick = S = 102 h.
    assert policy.set_spot_life(obs, cautious=True) == pytest.approx(102.0)
    # On it the job hops about S / L times, L = a zone's mean available run, the lower over all runs ((50 x 1
    # + 2) / 51 = 1.0196 h) and the last 10 ((10 + 2) / 11): spot pays when S (1 - k - d / L) > d:
    # 102 x (0.7 - 0.5 / 1.0196) = 21.4 > 0.5.
    assert policy.set_spot_pays(obs, 0.3)
    # So zone 0's session need only beat d/(1-k): leave on-demand. Hopping each tick costs 0.3 per tick for
    # 0.5 h of work (0.6 an hour of work, against 1.0 on on-demand), and the second on-demand overhead comes
    # only when the set loses spot.
    assert policy.decide(obs) == spot(0)
    # The same zone alone (or the rule off): 1.024 h < 1.429 h, on-demand is kept (a preemption after one tick
    # would send the job back to on-demand for a second overhead).
    alone = OrchPolicy(set_plan=False)
    alone.reset(spec, 1)
    assert alone.decide(on_demand_obs((z0,), z0, spec)) == ON_DEMAND
    off = OrchPolicy(set_lifetime=False, set_plan=False)
    off.reset(spec, 2)
    assert off.decide(obs) == ON_DEMAND


def test_a_set_whose_every_hop_is_all_overhead_is_not_left_on_demand_for() -> None:
    # As above but d = gap = 1 h: each zone session would be all overhead (no progress at 0.3 a tick), however
    # long the set keeps spot: S (1 - k - d / L) = 102 x (0.7 - 1 / 1.0196) < 0, and the zone's 1.024 h is
    # below 2d/(1-k) = 2.86 h (and d/(1-k) = 1.43 h). orch stays on on-demand and takes no zone from idle.
    z0 = stats_of("10" * 50 + "1", 1.0)
    z1 = stats_of("01" * 50 + "0", 1.0)
    any_zone = stats_of("1" * 101, 1.0)
    spec = ProblemSpec(work_h=40, deadline_h=60, overhead_h=1.0, spot_price=0.3)
    policy = OrchPolicy(set_plan=False)
    policy.reset(spec, 2)
    obs = on_demand_obs((z0, z1), any_zone, spec)
    assert not policy.set_spot_pays(obs, 0.3)
    assert policy.decide(obs) == ON_DEMAND
    assert policy.best_zone(obs, 1.0 / 0.7) is None


def test_among_zones_whose_savings_tie_the_longest_lived_is_taken() -> None:
    # Two zones at the same price, both with spot now (a run 1 tick old, gap 1 h): zone 0's runs last 5 h,
    # zone 1's 20 h. Lifetimes: 1 + (20 x 4 + 2w) / (20 + w) = 4.95 h and 1 + (5 x 19 + 2w) / (5 + w) = 19.2 h
    # (w = e^-0.5). With 2 h of work left both savings are (1 - k)(min(L, 2) - d) - k d = 0.7 x 1.5 - 0.15 =
    # 0.9: a tie, and orch takes zone 1, whose estimate has the more margin (the first zone before).
    z0 = stats_of(("1" * 5 + "0") * 20 + "1", 1.0)
    z1 = stats_of(("1" * 20 + "0") * 5 + "1", 1.0)
    spec = ProblemSpec(work_h=40, deadline_h=80, overhead_h=0.5, spot_price=0.3)
    obs = Observation(tick=10, elapsed_h=40.0, gap_h=1.0, spec=spec, work_done_h=38.0, mode=Mode.IDLE,
                      zone=None, overhead_left_h=0.0, available=(True, True), spot_prices=(0.3, 0.3),
                      history=(z0, z1), any_zone=stats_of("1" * 121, 1.0))
    policy = OrchPolicy(set_plan=False)
    policy.reset(spec, 2)
    w = math.exp(-0.5)
    assert policy.lifetime(obs, 0) == pytest.approx(1 + (20 * 4 + 2 * w) / (20 + w))
    assert policy.lifetime(obs, 1) == pytest.approx(1 + (5 * 19 + 2 * w) / (5 + w))
    assert policy.decide(obs) == spot(1)
    first = OrchPolicy(tie_life=False, set_plan=False)
    first.reset(spec, 2)
    assert first.decide(obs) == spot(0)
