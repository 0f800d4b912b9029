"""orch's forecasts (``ZoneForecasts``, a base of ``OrchPolicy``): a zone's spot lifetime, the set's, the shortfall X,
and which outages on-demand covers. orch.py's module docstring states the rules these feed; this module holds
the estimates from a zone's past (forecast.py's run tables) and the rules' switches they read.
"""

from __future__ import annotations

import math

from orchestrator.policy.forecast import RunTables, excess_mean, mean_run, residual
from orchestrator.policy.model import Observation, ZoneStats

_EPS = 1e-9
#: The opening share of the window in which an outage is not covered while the shortfall fits in the slack
#: (``early_wait``; a constant of the method, not fitted per trace: 0.1-0.3 measured alike, docs/policy.md).
EARLY_WINDOW = 0.2


class ZoneForecasts:
    """The forecasts of one job, from the run tables of its zones' pasts (``OrchPolicy`` sets the attributes
    below in its constructor: the switches ``recent_check``, ``early_wait``, ``cover_pays``, ``cover_longest``
    and the caches ``_tables`` / ``_recent``; orch.py's class docstring describes each)."""

    recent_check: int | None
    early_wait: bool
    cover_pays: bool
    cover_longest: bool
    _tables: RunTables
    _recent: RunTables

    def lifetime(self, obs: Observation, z: int, cautious: bool = False) -> float:
        """Predicted hours of spot from now in zone z (available now): this tick, and the expected rest of
        its current run (which has lasted ``streak`` so far, this tick included). ``cautious``: the lower of
        that over all runs kept and over the last ``recent_check`` (a zone flapping lately is not trusted
        on its longer past: used before leaving on-demand, where a short run costs two overheads)."""
        if not obs.history:
            return math.inf
        stats = obs.history[z]
        age = stats.streak_h if stats.available else obs.gap_h
        life = residual(self._tables, stats, True, age)
        if cautious and self.recent_check:
            life = min(life, residual(self._recent, stats, True, age))
        return obs.gap_h + life

    def set_spot_life(self, obs: Observation, cautious: bool = False) -> float:
        """Predicted hours of spot somewhere in the set from now (this tick and the residual of the set's
        current spot run), the cautious way as ``lifetime``; 0 when the set's history is not known."""
        stats = obs.any_zone
        if stats is None or not stats.available:
            return 0.0
        life = residual(self._tables, stats, True, stats.streak_h)
        if cautious and self.recent_check:
            life = min(life, residual(self._recent, stats, True, stats.streak_h))
        return obs.gap_h + life

    def set_stats(self, obs: Observation) -> ZoneStats | None:
        """The history of "some zone has spot": the simulator's (or the daemon's) any-zone stats."""
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
        return obs.remaining_h - max(rho, 0.0) * max(obs.time_left_h, 0.0)

    def covers_now(self, obs: Observation, shortfall: float) -> bool:
        """Whether this outage (of its age now) is one of those on-demand should cover (module docstring)."""
        stats = self.set_stats(obs)
        if shortfall <= 0 or stats is None:
            return False
        if self.early_wait and self.waits_early(obs, shortfall):
            return False
        d = obs.spec.overhead_h
        age = stats.streak_h if not stats.available else 0.0
        if self.cover_pays and len(obs.history) == 1 and not self.session_pays(obs, stats, age):
            return False
        if not self.cover_longest:
            return True
        cycle = mean_run(self._tables, stats, True) + mean_run(self._tables, stats, False)
        outages = max(obs.time_left_h, 0.0) / cycle
        return outages * excess_mean(self._tables, stats, False, age + d) <= shortfall

    def session_pays(self, obs: Observation, stats: ZoneStats, age: float) -> bool:
        """Whether this outage (of ``age``) is expected to last the restart break-even d / (1 - k) more: an
        on-demand session started in it pays its overhead d at on-demand's price before it makes progress, and
        spot coming back sooner leaves it mostly overhead (module docstring, ``cover_pays``)."""
        k = min(obs.spot_prices) if obs.spot_prices else obs.spec.spot_price
        return residual(self._tables, stats, False, age) >= obs.spec.overhead_h / max(1 - k, _EPS)

    def waits_early(self, obs: Observation, shortfall: float) -> bool:
        """In the window's first ``EARLY_WINDOW``, whether the shortfall still fits in the slack left beyond
        the Safety Net's two overheads: then no outage is covered yet (module docstring)."""
        spec = obs.spec
        if obs.elapsed_h >= EARLY_WINDOW * spec.deadline_h:
            return False
        return shortfall < obs.slack_h - 2 * spec.overhead_h
    def set_spot_pays(self, obs: Observation, k: float) -> bool:
        """Whether leaving on-demand for the set's spot pays, hops included (zone sets only).

        The set keeps spot for S more hours (``set_spot_life``, cautious); on it the job hops about S / L times
        (L: a zone's mean available run, the lower of that over all runs kept and over the last ones), each hop
        one more overhead, and goes back to on-demand once (one more). Spot pays over staying on on-demand when
        (1 - k) S > (S / L + 1) d, i.e. S (1 - k - d / L) > d; for one zone (S = L) that is 2d / (1 - k).
        """
        d = obs.spec.overhead_h
        life = self.set_spot_life(obs, cautious=True)
        zone_up = min(
            sum(mean_run(tables, h, True) for h in obs.history) / len(obs.history)
            for tables in ((self._tables, self._recent) if self.recent_check else (self._tables,))
        )
        return life * (1 - k - d / zone_up) > d
