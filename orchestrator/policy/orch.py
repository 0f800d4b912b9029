"""orch's policy (v3): a forecast of each zone from its past, under Uniform Progress's safety net.

Uniform Progress (UP) spends the slack evenly: it buys on-demand whenever the job is behind the straight line
C t / D, even early in a window whose spot will later be plentiful, and finishes hours before the deadline
having paid on-demand for them. orch spends the slack where a forecast says it is cheapest, and keeps UP's
Safety Net, which alone guarantees the deadline (on-demand once the time left holds no more than the work,
two overheads and the tick's rounding).

The forecast (``orch_forecasts.py``, over ``forecast.py``'s run tables): per zone, and for "some zone has spot",
the lengths of the available runs and outages seen so far (the two weeks before the job and the job itself;
only the past). From them:

* spot's productive rate rho = E[(U - d)^+] / (mean available run + mean outage) (every run pays one
  overhead; in a zone set, every zone lost while others have spot costs one more);
* the shortfall X = remaining work - rho x time left: the work on-demand must do if the future looks like
  the past. X <= 0: the spot ahead is enough; every outage is waited out (no on-demand bought early). No
  reserve beyond the Safety Net's: every reserve measured cost more (docs/policy.md);
* which outages to cover: all outages cost the same per hour on on-demand, but each on-demand session pays
  one more overhead, so covering the longest is cheapest. In an outage that has lasted tau, the outages ahead
  (n = time left / mean cycle) would be covered beyond age tau for n x E[(L - tau - d)^+] hours: orch goes
  on-demand when that is no more than X (tau has reached the threshold that covers just the shortfall), and
  only when behind UP's line (ahead of it, it waits as UP does). Long-tailed outages make this "wait out the
  short ones, cover the long ones early". An outage being covered is covered to its end;
* an on-demand session pays its overhead d at on-demand's price before it makes progress, so on a single zone
  an outage is covered only when its expected residual (by the ended outages) is at least the restart
  break-even d / (1 - k) (``cover_pays``): one about to end would leave a session that is mostly overhead.
  Zone sets cover as before: there the rule cost a public run dearly (docs/policy.md, v3.1).

And the restart overhead's break-evens (Can't Be Late, section 5.4): from idle, a zone's spot is taken only
when its predicted lifetime (this tick and the expected residual of its current available run, from its run
lengths) beats d / (1 - k); from on-demand only beyond 2d / (1 - k), on the lower of that lifetime over all
runs kept and over the zone's last ``recent_check`` runs, and never when on-demand finishes the job for less
than spot could (r + o <= k (d + r)). Leaving on-demand for a run after which the job comes back to
on-demand (one zone, or a set whose spot does not pay for its hops) also needs the odds: the zone's current
run must last the break-even 2d / (1 - k) more with probability at least one half by its ended runs
(``od_odds``). Run lengths are long-tailed: a flappy zone's mean residual is carried by its few long runs, and
leaving on-demand for each young run pays two overheads for every short one (the mean says go, the median
says stay; at d = 0.5 h the two overheads are an hour).
In a zone set a preempted job hops to another zone, so the second on-demand overhead comes only when the whole
set loses spot: when the set's spot run S (any-zone history) pays for its hops, S (1 - k - d / L) > d with L a
zone's mean available run, leaving on-demand asks only that the zone's session beat d / (1 - k). A new spot
instance goes to the zone with the largest expected saving (1 - k_z) (min(L_z, r) - d) - k_z d, L_z its
predicted lifetime: the most stable zone, weighed by price (on a tie, the longest-lived).
In a zone set, from idle with slack to spare (X < -``SPARE_BREAK_EVENS`` d / (1 - k), at or ahead of UP's
line), a launch must also be likely to pay its overhead: a zone whose current run, by its ended runs, lasts
the next d / (1 - k) with probability below one half is passed over for the zone most likely to (or, with
none, the job waits): run lengths are long-tailed, so a zone's mean residual says little about whether this
run is one of its many short ones, and each short one is an overhead lost.
Early in the window (its first ``EARLY_WINDOW``), an outage is not covered while the shortfall X still fits
in the slack left beyond the Safety Net's two overheads (X < time left - work left - 2d): the forecast knows
least about this window then and the slack is the largest, so waiting costs nothing yet, and the window's
own spot may make the on-demand unnecessary; a shortfall the slack cannot absorb is covered as before, and
the Safety Net still guarantees the deadline.
With a preemption notice, a zone about to lose spot is never launched into, and an instance that would spend
the tick on its overhead before the preemption is stopped (it could make no progress).
A zone set whose overhead is large (d >= ``SET_PLAN_MIN_OVERHEAD_H``) is planned, not ruled (``set_plan``):
orch hands every decision of that job to orch-mdp (mdp.py), which spends the slack over the whole window on
a model of the set's availability, overheads and hops counted; at half-hour overheads each launch or hop is
1/24 to 1/48 of the slack, and the rules above weigh one decision at a time (docs/policy.md, v3.2).
"""

from __future__ import annotations

import math

from orchestrator.policy.base import SpotPolicy, new_planner
from orchestrator.policy.forecast import RunTables, survival
from orchestrator.policy.model import ON_DEMAND, WAIT, Action, Mode, Observation, ProblemSpec, spot
from orchestrator.policy.orch_forecasts import ZoneForecasts
from orchestrator.policy.policies import paper_safety_net

_EPS = 1e-9
#: The slack to spare, in break-evens d / (1 - k) of shortfall below zero, before a zone set's launches are
#: filtered by their odds of paying the overhead (a constant of the method, not fitted per trace).
SPARE_BREAK_EVENS = 4.0
#: The overhead from which a zone set's job is planned by orch-mdp (``set_plan``): two of its 15-minute steps.
#: Measured at d = 0.2 h (orch's rules closed more) and 0.5 h (the plan closed more in every zone-set row).
SET_PLAN_MIN_OVERHEAD_H = 0.5


def finishes_on_demand(obs: Observation) -> bool:
    """On on-demand with work left, whether finishing there (what is left of its overhead, then the work left r)
    costs no more than spot could even never preempted, k (d + r): then every other way to the end costs at
    least as much (a spot session k (d + r), a later on-demand session d + r) and finishes no sooner, so the job
    stays on on-demand to its end (the condition holds on every later tick: both sides shrink, the left faster).
    """
    if obs.mode is not Mode.ON_DEMAND or obs.remaining_h <= 0:
        return False
    k = min(obs.spot_prices) if obs.spot_prices else obs.spec.spot_price
    r = obs.remaining_h
    return obs.overhead_left_h + r <= k * (obs.spec.overhead_h + r) + _EPS


class OrchPolicy(ZoneForecasts):
    """See the module docstring. Per-job state: the caches of sorted run tables (cleared by ``reset``).

    The switches turn single rules off, for measuring each (docs/policy.md); the defaults are orch.
    ``tie_life``: among zones whose expected savings tie (every lifetime beyond the work left), the
    longest-lived (the estimates are uncertain: the longer one leaves more margin). ``recent_check``: before
    leaving on-demand, a zone's lifetime is the lower of the estimate over every run kept and over its last
    ``recent_check`` runs. ``odds_filter``: the zone set's filter on a launch's odds of paying its overhead
    (module docstring). ``slack_cost``: overheads of slack a launch costs, in the
    break-evens, while the slack is short. ``early_wait``: no outage covered in the window's first
    ``EARLY_WINDOW`` while the shortfall fits in the slack (module docstring). ``od_odds``: leaving on-demand
    for a spot run that ends in on-demand again only when the run lasts the break-even with odds of at least
    one half (module docstring). ``cover_pays``: on a single zone, an outage is covered only when it is
    expected to last the restart break-even d / (1 - k) more (module docstring). ``set_plan``: a zone set
    whose overhead is at least ``SET_PLAN_MIN_OVERHEAD_H`` is decided by orch-mdp (module docstring).
    """

    name = "orch"
    # A spot instance past its overhead is kept (the Safety Net keeps it too; so does orch-mdp, ``set_plan``)
    # unless a notice says it goes: the simulator need not ask then (base.py).
    keeps_paid_spot_unnoticed = True

    def __init__(
        self,
        *,
        cover_longest: bool = True,
        lifetime_filter: bool = True,
        stable_zone: bool = True,
        slack_cost: float = 0.0,
        recent_check: int | None = 10,
        set_lifetime: bool = True,
        tie_life: bool = True,
        odds_filter: bool = True,
        early_wait: bool = True,
        od_odds: bool = True,
        cover_pays: bool = True,
        set_plan: bool = True,
    ) -> None:
        self.set_plan = set_plan
        self._planner: SpotPolicy | None = None
        self.cover_pays = cover_pays
        self.od_odds = od_odds
        self.early_wait = early_wait
        self.odds_filter = odds_filter
        self.tie_life = tie_life
        self.set_lifetime = set_lifetime
        self.cover_longest = cover_longest
        self.lifetime_filter = lifetime_filter
        self.stable_zone = stable_zone
        self.slack_cost = slack_cost
        self.recent_check = recent_check
        self._tables = RunTables()
        self._recent = RunTables(recent_check)

    def reset(self, spec: ProblemSpec, zones: int) -> None:
        self._tables.clear()
        self._recent.clear()
        self._planner = None
        if self.set_plan and zones > 1 and spec.overhead_h >= SET_PLAN_MIN_OVERHEAD_H - _EPS:
            self._planner = new_planner()
            self._planner.reset(spec, zones)

    # --- the decision --------------------------------------------------------------------------------
    def best_zone(self, obs: Observation, threshold_h: float, cautious: bool = False) -> int | None:
        """The available zone (none noticed) with the largest expected saving, if its lifetime beats
        ``threshold_h``."""
        d, r = obs.spec.overhead_h, obs.remaining_h
        best: int | None = None
        best_score = best_life = -math.inf
        for z in obs.launchable():
            k = obs.spot_prices[z]
            life = self.lifetime(obs, z, cautious) if (self.stable_zone or self.lifetime_filter) else math.inf
            if self.lifetime_filter and life <= threshold_h:
                continue
            score = (1 - k) * (min(life, r) - d) - k * d if self.stable_zone else -k
            if score > best_score + _EPS or (self.tie_life and score > best_score - _EPS and life > best_life):
                best, best_score, best_life = z, score, life
        return best

    def decide(self, obs: Observation) -> Action:
        if self._planner is not None:
            return self._planner.decide(obs)
        if obs.remaining_h <= 0:
            return WAIT
        spec = obs.spec
        d = spec.overhead_h
        forced = paper_safety_net(obs)
        if forced is not None:
            return forced
        if obs.mode is Mode.SPOT:
            assert obs.zone is not None
            stuck = (
                obs.notice and obs.notice[obs.zone] and obs.overhead_left_h >= min(obs.gap_h, obs.time_left_h) - _EPS
            )
            if not stuck:
                return spot(obs.zone)  # Exploitation: a live spot instance is kept
        k_min = min(obs.spot_prices) if obs.spot_prices else spec.spot_price
        x = self.shortfall(obs)
        # A launch also spends d of slack; when the slack is short (X > 0), that is worth on-demand hours.
        tight = self.slack_cost * d if x is not None and x > 0 else 0.0
        if obs.mode is Mode.ON_DEMAND:
            return self._from_on_demand(obs, k_min, tight)
        z = self.best_zone(obs, d / max(1 - k_min, _EPS) + tight)
        behind = obs.work_done_h < spec.work_h / spec.deadline_h * obs.elapsed_h
        if z is not None:
            if self.odds_filter and x is not None and not behind and len(obs.history) > 1:
                return self._likely_zone(obs, z, x, d / max(1 - k_min, _EPS))
            return spot(z)
        if x is None:  # no history at all: Uniform Progress's line
            return ON_DEMAND if behind else WAIT
        # Ahead of UP's line orch waits, as UP does; behind it, on-demand only for an outage worth covering.
        return ON_DEMAND if behind and self.covers_now(obs, x) else WAIT

    def _likely_zone(self, obs: Observation, z: int, x: float, break_even: float) -> Action:
        """From idle in a zone set, ahead of UP's line: ``z`` (the zone choice's pick) unless the slack is
        to spare (X < -SPARE_BREAK_EVENS x ``break_even``) and z's current run lasts ``break_even`` more with
        probability below 1/2; then the zone most likely to (lifetime beyond ``break_even``), or WAIT."""

        def odds(zone: int) -> float:
            stats = obs.history[zone]
            return survival(self._tables, stats, stats.streak_h, break_even)

        if x >= -SPARE_BREAK_EVENS * break_even:
            return spot(z)
        if odds(z) >= 0.5:
            return spot(z)
        likely = [c for c in obs.launchable() if odds(c) >= 0.5 and self.lifetime(obs, c) > break_even]
        return spot(max(likely, key=odds)) if likely else WAIT

    def _pays_odds(self, obs: Observation, z: int, hours: float) -> bool:
        """Whether zone z's current run lasts ``hours`` more with probability at least one half."""
        stats = obs.history[z]
        return survival(self._tables, stats, stats.streak_h, hours) >= 0.5

    def _from_on_demand(self, obs: Observation, k_min: float, tight: float) -> Action:
        d = obs.spec.overhead_h
        if finishes_on_demand(obs):
            return ON_DEMAND
        # Leaving on-demand pays this spot session's overhead (worth it beyond d/(1-k) of the zone's spot) and,
        # when spot ends, one more on-demand overhead: in a zone set only when the set's spot ends, since a
        # preempted job hops to another zone (each hop is a session of its own, weighed as from idle).
        hops = self.set_lifetime and len(obs.history) > 1 and self.set_spot_pays(obs, k_min)
        need = (1 if hops else 2) * (d / max(1 - k_min, _EPS) + tight)
        z = self.best_zone(obs, need, cautious=True)
        if z is not None and self.od_odds and not hops and not self._pays_odds(obs, z, need):
            return ON_DEMAND
        return spot(z) if z is not None else ON_DEMAND
