"""The daemon's recovery asks a SpotPolicy: the same code ``orch simulate`` measures, fed with live facts.

``SpotPolicyRecovery`` implements ``orchestrator.engine.recovery_policy.RecoveryPolicy``. For a job with a deadline
and an estimate (``policies.deadline`` and ``policies.estimated_hours``) it poses the simulator's problem from what the
daemon knows and maps the policy's action onto a recovery decision:

* the problem: work C = the estimate, deadline D = deadline - the job's start, overhead d = ``overhead_h`` (what
  a restart costs: boot, setup, restore), spot price k = cheapest eligible spot / cheapest on-demand $/h;
* the observation: elapsed = now - start; work done = the hours its machines have run it so far (minus one
  overhead per machine: a progress estimate, not a measurement); mode = spot on the current place when the
  job runs there, else idle; a place (zone, else region) of its eligible spot offers is "available" unless it
  was preempted within the cool-down (a daemon learns a zone's spot is gone from its preemptions); each
  place's spot price is its cheapest eligible spot offer over the cheapest on-demand (the catalog's); each
  place's history, and the set's, are built from the recorded spot machines and their preemptions and
  notices (``live_history.place_history``): the job's own and the fleet's (every job's of this owner on the
  same GPU models, the last week: ``ctx.fleet_runs``; built once per tick and shared by the jobs whose own
  record adds nothing to it: ``live_history.SharedHistory``), the same ZoneStats the simulator gives a policy; a
  place whose history shows an outage in progress (a preemption within the cool-down and no machine
  started there since, of any job) is not available either; spent = the job's spend over the cheapest
  eligible on-demand $/h (the simulator's cost so far, in hours of on-demand; None without an on-demand
  price);
* the action: WAIT -> WAIT (the engine asks again next tick), ON_DEMAND -> relaunch on on-demand, SPOT(z) ->
  relaunch on spot in z (the other places are excluded from that launch); for a running spot job (its
  overhead left = d - its age), keeping its instance -> KEEP, ON_DEMAND -> move to on-demand (Uniform
  Progress's safety net moves a spot instance still in its overhead when the deadline has no room left for a
  preemption);
* a noticed spot machine (``ctx.noticed``): the observation carries the notice for its zone, with the notice
  window as the tick; anything but keeping it -> END (its overhead outlasts the window, so it would be billed
  for no progress: end it now), keeping it -> KEEP (drain it: it may still commit a checkpoint).

Jobs without a deadline or an estimate, or whose problem cannot be posed, get ``fallback``'s decision;
max relaunches, budget and a passed deadline are checked first, as by the default policy.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from orchestrator.engine.recovery_policy import (
    DefaultRecoveryPolicy,
    RecoveryAction,
    RecoveryContext,
    RecoveryDecision,
    RecoveryPolicy,
    cooling_places,
    give_up_reason,
)
from orchestrator.policy.base import SpotPolicy
from orchestrator.policy.live_history import SharedHistory
from orchestrator.policy.model import Mode, Observation, ProblemError, ProblemSpec, ZoneStats
from providers.base import Market

_ON_DEMAND = frozenset({Market.ON_DEMAND})
_SPOT = frozenset({Market.SPOT})


class SpotPolicyRecovery:
    """See the module docstring. ``make_policy`` builds a fresh SpotPolicy per decision (a policy keeps
    per-job state only between ``reset`` and its job's end; the daemon's facts are re-read every time)."""

    #: The daemon reads the fleet's spot history for it (orchestrator/engine/recovery_facts.py).
    uses_history = True

    def __init__(self, make_policy: Callable[[], SpotPolicy], *, overhead_h: float = 0.2, gap_h: float = 1 / 60,
                 fallback: RecoveryPolicy | None = None) -> None:
        self.make_policy = make_policy
        self.overhead_h = overhead_h
        self.gap_h = gap_h
        self.fallback = fallback or DefaultRecoveryPolicy()
        #: The fleet's history, built once per tick for all jobs with the same places (live_history.py).
        self.histories = SharedHistory()

    def problem(self, ctx: RecoveryContext) -> ProblemSpec | None:
        """The simulator's problem for this job, or None where it cannot be posed from the facts."""
        if ctx.deadline is None or ctx.started_at is None or not ctx.estimated_hours:
            return None
        try:
            return ProblemSpec(work_h=ctx.estimated_hours,
                               deadline_h=(ctx.deadline - ctx.started_at).total_seconds() / 3600,
                               overhead_h=self.overhead_h,
                               spot_price=ctx.spot_price_ratio if ctx.spot_price_ratio is not None else 0.3)
        except ProblemError:
            return None

    def observation(self, ctx: RecoveryContext, spec: ProblemSpec) -> Observation:
        assert ctx.started_at is not None
        elapsed = max((ctx.now - ctx.started_at).total_seconds() / 3600, 0.0)
        places = list(ctx.spot_places)
        if ctx.on_spot and ctx.current_place is not None and ctx.current_place not in places:
            places.append(ctx.current_place)
        # The places' history: what the job's and the fleet's spot machines met there (live_history.py).
        history, any_place = self.histories.history(places, ctx.spot_runs, ctx.fleet_runs, ctx.now, ctx.cooldown)
        cooling = cooling_places(ctx) | {p for p, h in zip(places, history, strict=True) if _out_now(h, ctx.cooldown)}
        available = tuple(p == ctx.current_place if ctx.on_spot else p not in cooling for p in places)
        ratios = dict(zip(ctx.spot_places, ctx.spot_place_ratios, strict=False))
        prices = tuple(ratios.get(p, spec.spot_price) for p in places)
        runs = len(ctx.preemptions) + (1 if ctx.on_spot else 0)
        done = min(max(ctx.running_hours - runs * spec.overhead_h, 0.0), spec.work_h)
        zone = places.index(ctx.current_place) if ctx.on_spot and ctx.current_place in places else None
        # A noticed machine: its zone loses spot when the notice window ends, so that window is the tick.
        noticed = ctx.noticed and zone is not None and ctx.notice_window_hours > 0
        gap = ctx.notice_window_hours if noticed else self.gap_h
        return Observation(
            tick=int(elapsed / gap), elapsed_h=elapsed, gap_h=gap, spec=spec, work_done_h=done,
            mode=Mode.SPOT if zone is not None else Mode.IDLE, zone=zone,
            overhead_left_h=max(spec.overhead_h - ctx.current_age_hours, 0.0) if zone is not None else 0.0,
            available=available, spot_prices=prices,
            notice=tuple(i == zone for i in range(len(places))) if noticed else (), history=history,
            any_zone=any_place, spent=ctx.spent_usd / ctx.on_demand_hr if ctx.on_demand_hr else None,
        )

    def decide(self, ctx: RecoveryContext) -> RecoveryDecision:
        if not ctx.on_spot:
            stop = give_up_reason(ctx)
            if stop is not None:
                return RecoveryDecision(RecoveryAction.GIVE_UP, stop)
        spec = self.problem(ctx)
        if spec is None or Market.SPOT not in ctx.markets:
            return self.fallback.decide(ctx)
        obs = self.observation(ctx, spec)
        policy = self.make_policy()
        policy.reset(spec, obs.zones)
        action = policy.decide(obs)
        facts = (f"{obs.remaining_h:.1f} h of work left, {obs.time_left_h:.1f} h to the deadline, "
                 f"slack {obs.slack_h:.1f} h")
        exclude = cooling_places(ctx)
        if ctx.on_spot and ctx.noticed:
            # The replacement is decided after the preemption; here only: drain this machine, or end it now.
            if not (action.mode is Mode.SPOT and action.zone == obs.zone):
                return RecoveryDecision(RecoveryAction.END, f"{policy.name}: end it now: still in its restart "
                                        f"overhead, it can make no progress before the preemption ({facts})")
            return RecoveryDecision(RecoveryAction.KEEP, f"{policy.name}: drain it ({facts})")
        if ctx.on_spot:
            if action.mode is Mode.ON_DEMAND:
                return RecoveryDecision(RecoveryAction.RELAUNCH, f"{policy.name}: move to on-demand ({facts})",
                                        _ON_DEMAND, exclude)
            return RecoveryDecision(RecoveryAction.KEEP, f"{policy.name}: keep spot ({facts})")
        if action.mode is Mode.IDLE:
            return RecoveryDecision(RecoveryAction.WAIT, f"{policy.name}: wait for spot ({facts})")
        if action.mode is Mode.ON_DEMAND:
            # The deadline outranks a spot-only market preference, as in the default policy.
            return RecoveryDecision(RecoveryAction.RELAUNCH, f"{policy.name}: relaunch on on-demand ({facts})",
                                    _ON_DEMAND, exclude)
        markets = _SPOT if Market.SPOT in ctx.markets else ctx.markets
        # The zone the policy chose: the other places are kept out of this launch.
        places = list(ctx.spot_places)
        chosen = places[action.zone] if action.zone is not None and action.zone < len(places) else None
        where = f" in {chosen}" if chosen is not None else ""
        if chosen is not None:
            exclude = exclude | frozenset(p for p in places if p != chosen)
        return RecoveryDecision(RecoveryAction.RELAUNCH, f"{policy.name}: relaunch on spot{where} ({facts})",
                                markets, exclude)


def _out_now(stats: ZoneStats, cooldown: timedelta) -> bool:
    """The place's history ends in an outage in progress: a preemption less than the cool-down ago, no
    machine started there since (live_history.py; as ``cooling_places`` counts a job's own preemptions)."""
    return stats.seen_h > 0 and not stats.available and stats.streak_h < cooldown.total_seconds() / 3600


def recovery_for(name: str, *, overhead_h: float = 0.2) -> RecoveryPolicy:
    """The daemon's recovery for a configured name: ``default``, or any policy of ``orch simulate``."""
    if name in ("", "default"):
        return DefaultRecoveryPolicy()
    from orchestrator.policy.registry import make_policy

    make_policy(name)  # an unknown name fails here, at start-up, not at the first preemption
    return SpotPolicyRecovery(lambda: make_policy(name), overhead_h=overhead_h)
