"""orch's policy (v2): a forecast of each zone from its past, under Uniform Progress's safety net.

Uniform Progress (UP) spends the slack evenly: it buys on-demand whenever the job is behind the straight line
C t / D, even early in a window whose spot will later be plentiful, and finishes hours before the deadline
having paid on-demand for them. orch spends the slack where a forecast says it is cheapest, and keeps UP's
Safety Net, which alone guarantees the deadline (on-demand once the time left holds no more than the work,
two overheads and the tick's rounding).

The forecast (``forecast.py``): per zone, and for "some zone has spot", the lengths of the available runs and
outages seen so far (the two weeks before the job and the job itself; only the past). From them:

* spot's productive rate rho = availability - launches per hour x d (every run pays one overhead);
* the shortfall X = remaining work - rho x time left + a reserve: the work on-demand must do if the future
  looks like the past. X <= 0: the slack covers every outage; wait them all out (no on-demand bought early);
* which outages to cover: all outages cost the same per hour on on-demand, but each on-demand session pays
  one more overhead, so covering the longest is cheapest. In an outage that has lasted tau, the outages ahead
  (n = time left / mean cycle) would be covered beyond age tau for n x E[(L - tau - d)^+] hours: orch goes
  on-demand when that is no more than X (tau has reached the threshold that covers just the shortfall).
  Long-tailed outages make this "wait out the short ones, cover the long ones early".

And the restart overhead's break-evens (Can't Be Late, section 5.4): from idle, a zone's spot is taken only
when its predicted lifetime (expected residual of its current available run, from its run lengths) beats
d / (1 - k); on on-demand, spot is taken only beyond 2d / (1 - k), and never when on-demand finishes the job
for less than spot could (r + o <= k (d + r)). A new spot instance goes to the zone with the largest expected
saving (1 - k_z) (min(L_z, r) - d) - k_z d, L_z its predicted lifetime: the most stable zone, weighed by price.
With a preemption notice, a zone about to lose spot is never launched into, and an instance that would spend
the tick on its overhead before the preemption is stopped (it could make no progress).
"""

from __future__ import annotations

import math

from orchestrator.policy.forecast import RunTables, excess_mean, mean_run, residual
from orchestrator.policy.model import ON_DEMAND, WAIT, Action, Mode, Observation, ProblemSpec, ZoneStats, spot
from orchestrator.policy.policies import paper_safety_net

_EPS = 1e-9


class OrchPolicy:
    """See the module docstring. Per-job state: the cache of sorted run tables (cleared by ``reset``).

    ``reserve_per_sqrt_h``: the reserve kept against a forecast's error, as a multiple of
    sqrt(time left x mean outage) (the spread of an alternating process's available time grows like that),
    plus two overheads and two ticks. ``release_h``: on on-demand with no spot, how far below zero the shortfall
    must fall (in overheads) before orch stops paying and waits again.
    """

    name = "orch"

    def __init__(self, reserve_per_sqrt_h: float = 0.0, release_overheads: float = 4.0,
                 cover_longest: bool = True, lifetime_filter: bool = True, stable_zone: bool = True,
                 line: bool = True, hysteresis: bool = False, reserve_fixed: float = 0.0,
                 return_overheads: float = 2.0, line_lag_overheads: float = 0.0, recent: int | None = None,
                 guard: float | None = None, current_outage: bool = False, slack_cost: float = 1.0,
                 floor: float | None = None) -> None:
        self.floor = floor
        self.slack_cost = slack_cost
        self.current_outage = current_outage
        self.guard = guard
        self.line_lag_overheads = line_lag_overheads
        self.reserve_fixed = reserve_fixed
        self.return_overheads = return_overheads
        self.line = line
        self.hysteresis = hysteresis
        self.reserve_per_sqrt_h = reserve_per_sqrt_h
        self.release_overheads = release_overheads
        self.cover_longest = cover_longest
        self.lifetime_filter = lifetime_filter
        self.stable_zone = stable_zone
        self._tables = RunTables(recent)

    def reset(self, spec: ProblemSpec, zones: int) -> None:
        self._tables.clear()

    # --- forecasts -------------------------------------------------------------------------------------
    def lifetime(self, obs: Observation, z: int) -> float:
        """Predicted hours of spot from now in zone z (available now): this tick, and the expected rest of
        its current run (which has lasted ``streak`` so far, this tick included)."""
        if not obs.history:
            return math.inf
        stats = obs.history[z]
        age = stats.streak_h if stats.available else obs.gap_h
        return obs.gap_h + residual(self._tables, stats, True, age)

    def set_stats(self, obs: Observation) -> ZoneStats | None:
        if obs.any_zone is not None:
            return obs.any_zone
        return obs.history[0] if len(obs.history) == 1 else None

    def shortfall(self, obs: Observation) -> float | None:
        """X: on-demand hours the job needs if the future looks like the past (None: no history)."""
        stats = self.set_stats(obs)
        if stats is None:
            return None
        d = obs.spec.overhead_h
        up, down = mean_run(self._tables, stats, True), mean_run(self._tables, stats, False)
        cycle = up + down
        # Productive spot per hour: each available run worth riding pays one overhead, E[(U - d)^+] per cycle;
        # in a zone set, each zone lost while others still have spot costs one more overhead (a hop).
        rho = excess_mean(self._tables, stats, True, d) / cycle
        if len(obs.history) > 1:
            zone_up = sum(mean_run(self._tables, h, True) for h in obs.history) / len(obs.history)
            if zone_up < up:
                rho -= (up / cycle) * d * (1 / zone_up - 1 / up)
        rho = max(rho, 0.0)
        t_left = max(obs.time_left_h, 0.0)
        if self.current_outage and not stats.available:
            # The outage now will last its expected residual: no spot in that part of the time left.
            t_left = max(t_left - residual(self._tables, stats, False, stats.streak_h), 0.0)
        reserve = self.reserve_fixed * (2 * d + 2 * obs.gap_h) + self.reserve_per_sqrt_h * math.sqrt(t_left * down)
        return obs.remaining_h - rho * t_left + reserve

    def covers_now(self, obs: Observation, shortfall: float) -> bool:
        """Whether this outage (of its age now) is one of those on-demand should cover (see the docstring)."""
        stats = self.set_stats(obs)
        if shortfall <= 0 or stats is None:
            return False
        if not self.cover_longest:
            return True
        d = obs.spec.overhead_h
        age = stats.streak_h if not stats.available else 0.0
        cycle = mean_run(self._tables, stats, True) + mean_run(self._tables, stats, False)
        outages = max(obs.time_left_h, 0.0) / cycle
        return outages * excess_mean(self._tables, stats, False, age + d) <= shortfall

    # --- the decision --------------------------------------------------------------------------------
    def best_zone(self, obs: Observation, threshold_h: float) -> int | None:
        """The available zone (none noticed) with the largest expected saving, if its lifetime beats
        ``threshold_h``."""
        d, r = obs.spec.overhead_h, obs.remaining_h
        best: int | None = None
        best_score = -math.inf
        for z, up in enumerate(obs.available):
            if not up or (obs.notice and obs.notice[z]):
                continue
            k = obs.spot_prices[z]
            life = self.lifetime(obs, z) if (self.stable_zone or self.lifetime_filter) else math.inf
            if self.lifetime_filter and life <= threshold_h:
                continue
            score = (1 - k) * (min(life, r) - d) - k * d if self.stable_zone else -k
            if score > best_score + _EPS:
                best, best_score = z, score
        return best

    def decide(self, obs: Observation) -> Action:
        if obs.remaining_h <= 0:
            return WAIT
        spec = obs.spec
        d = spec.overhead_h
        forced = paper_safety_net(obs)
        if obs.mode is Mode.SPOT:
            assert obs.zone is not None
            stuck = (obs.notice and obs.notice[obs.zone]
                     and obs.overhead_left_h >= min(obs.gap_h, obs.time_left_h) - _EPS)
            if forced is not None:
                return forced
            if not stuck:
                return spot(obs.zone)       # Exploitation: a live spot instance is kept
        elif forced is not None:
            return forced
        if self.guard is not None and obs.spent is not None and obs.mode is not Mode.SPOT:
            to_finish = obs.remaining_h + (obs.overhead_left_h if obs.mode is Mode.ON_DEMAND else d)
            if obs.spent + to_finish >= self.guard * spec.on_demand_cost:
                return ON_DEMAND
        k_min = min(obs.spot_prices) if obs.spot_prices else spec.spot_price
        x = self.shortfall(obs)
        # A launch also spends d of slack; when the slack is short (X > 0), that is worth on-demand hours.
        tight = self.slack_cost * d if x is not None and x > 0 else 0.0
        if obs.mode is Mode.ON_DEMAND:
            return self._from_on_demand(obs, k_min, x, tight)
        z = self.best_zone(obs, d / max(1 - k_min, _EPS) + tight)
        if z is not None:
            return spot(z)
        if x is None:   # no history at all: Uniform Progress's line
            return ON_DEMAND if obs.work_done_h < spec.work_h / spec.deadline_h * obs.elapsed_h else WAIT
        lag = self.line_lag_overheads * d
        line_now = spec.work_h / spec.deadline_h * obs.elapsed_h
        if self.floor is not None and obs.work_done_h < line_now - self.floor * (spec.deadline_h - spec.work_h):
            return ON_DEMAND
        if self.line and obs.work_done_h + lag >= spec.work_h / spec.deadline_h * obs.elapsed_h:
            return WAIT
        return ON_DEMAND if self.covers_now(obs, x) else WAIT

    def _from_on_demand(self, obs: Observation, k_min: float, x: float | None, tight: float) -> Action:
        d, r = obs.spec.overhead_h, obs.remaining_h
        # On-demand to the end costs no more than spot could, even never preempted: stay.
        if obs.overhead_left_h + r <= k_min * (d + r) + _EPS:
            return ON_DEMAND
        z = self.best_zone(obs, self.return_overheads * d / max(1 - k_min, _EPS) + 2 * tight)
        spec = obs.spec
        if self.hysteresis and obs.work_done_h < spec.work_h / spec.deadline_h * (obs.elapsed_h + 2 * d):
            return ON_DEMAND
        if z is not None:
            return spot(z)
        if any(obs.available):
            return ON_DEMAND   # spot there, but too short-lived to leave on-demand for
        if x is not None and x <= -self.release_overheads * d and not self.covers_now(obs, x):
            return WAIT
        return ON_DEMAND
