"""orch's zone-set filter on a launch's odds of paying its overhead (orchestrator/policy/orch.py), pinned on
hand-made zones with hand-computed figures. Conventions as in test_orch_set_rules.py (priors: a 2 h available
run and a 1 h outage, each worth one run, weighted e^(-age / prior))."""

from __future__ import annotations

import math

import pytest

from orchestrator.policy.forecast import RunTables, survival
from orchestrator.policy.model import WAIT, Mode, Observation, ProblemSpec, ZoneStats, spot
from orchestrator.policy.orch import OrchPolicy

GAP = 0.1
# Zone 0: nine 1-tick runs and one of 10 h, each followed by a 1-tick outage; now 1 tick into a new run.
FLAPPY_WITH_A_TAIL = "10" * 9 + "1" * 100 + "0" + "1"
# Zone 1: ten 0.6 h runs; now 1 tick into a new run.
STEADY = "1111110" * 10 + "1"


def stats_of(pattern: str) -> ZoneStats:
    stats = ZoneStats()
    for c in pattern:
        stats.observe(c == "1", GAP)
    return stats


def idle_obs(spec: ProblemSpec, zones: tuple[ZoneStats, ...], done_h: float) -> Observation:
    # 1 h into the job; the set has had spot all along (one unended run: its tables are the priors').
    return Observation(tick=10, elapsed_h=1.0, gap_h=GAP, spec=spec, work_done_h=done_h, mode=Mode.IDLE,
                       zone=None, overhead_left_h=0.0, available=tuple(z.available for z in zones),
                       spot_prices=(0.3,) * len(zones), history=zones, any_zone=stats_of("1" * 400))


def test_odds_of_a_run_lasting_the_break_even() -> None:
    # d 0.2 h, k 0.3: the break-even h = 0.2 / 0.7 = 0.2857 h. Zone 0's run has lasted 0.1 h: all 10 ended
    # runs reached that, one (10 h) lasted past 0.3857 h: (1 + 1) / (10 + 1). Zone 1: all ten 0.6 h runs did.
    h = 0.2 / 0.7
    flappy, steady = stats_of(FLAPPY_WITH_A_TAIL), stats_of(STEADY)   # both alive: the tables cache by id
    assert survival(RunTables(), flappy, 0.1, h) == pytest.approx(2 / 11)
    assert survival(RunTables(), steady, 0.1, h) == pytest.approx(1.0)


def test_with_slack_to_spare_a_zone_unlikely_to_pay_its_overhead_is_passed_over() -> None:
    spec = ProblemSpec(work_h=10, deadline_h=40, overhead_h=0.2, spot_price=0.3)
    zones = (stats_of(FLAPPY_WITH_A_TAIL), stats_of(STEADY))
    policy = OrchPolicy()
    policy.reset(spec, 2)
    obs = idle_obs(spec, zones, done_h=0.5)     # ahead of UP's line (0.25 h at 1 h)
    # Zone 0's mean residual at 0.1 h: (9.9 + 2w) / (10 + w), w = e^-0.05 -> lifetime 1.18 h; zone 1's
    # (5 + 2w) / (10 + w) -> 0.73 h. The zone choice's savings 0.7 (min(L, r) - 0.2) - 0.06 pick zone 0.
    w = math.exp(-0.05)
    assert policy.lifetime(obs, 0) == pytest.approx(0.1 + (9.9 + 2 * w) / (10 + w))
    assert policy.lifetime(obs, 1) == pytest.approx(0.1 + (5 + 2 * w) / (10 + w))
    assert policy.best_zone(obs, 0.2 / 0.7) == 0
    # X: the set's spot rate (priors: E[(U - 0.2)^+] = 2 e^-0.1 over a 3 h cycle, less the hops' overheads)
    # times 39 h left is far beyond the 9.5 h of work: X < -4 h. Zone 0 lasts 0.2857 h more with odds 2/11:
    # zone 1 (odds 1, lifetime 0.73 h > 0.2857 h) instead.
    x = policy.shortfall(obs)
    assert x is not None and x < -4 * 0.2 / 0.7
    assert policy.decide(obs) == spot(1)
    # The filter off: zone 0.
    off = OrchPolicy(odds_filter=False)
    off.reset(spec, 2)
    assert off.decide(obs) == spot(0)
    # Zone 1 out of spot now (its run ended a tick ago): no likely zone, the job waits (ahead of the line).
    alone = (zones[0], stats_of(STEADY[:-1] + "0"))
    assert policy.decide(idle_obs(spec, alone, done_h=0.5)) == WAIT


def test_without_slack_to_spare_the_zone_choice_stands() -> None:
    # 30 h of work, 29 h left of it in 39 h: X = 29 - rho x 39 > 0 (rho < 0.61): no filter, zone 0.
    spec = ProblemSpec(work_h=30, deadline_h=40, overhead_h=0.2, spot_price=0.3)
    policy = OrchPolicy()
    policy.reset(spec, 2)
    obs = idle_obs(spec, (stats_of(FLAPPY_WITH_A_TAIL), stats_of(STEADY)), done_h=1.0)
    x = policy.shortfall(obs)
    assert x is not None and x > 0
    assert policy.decide(obs) == spot(0)
