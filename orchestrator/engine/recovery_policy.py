"""What to do after a preemption: the recovery policy, behind one small interface.

The daemon gathers the facts (RecoveryContext); a RecoveryPolicy returns a decision. It is asked after a
preemption (``on_spot`` None: the job has no machine), again on every tick while a job it told to WAIT is
recovering, on every tick for a job running on spot that has a deadline and an estimate (``on_spot``
True: KEEP, or RELAUNCH on on-demand to meet the deadline), and when a single-node job's spot machine gets a
preemption notice (``noticed`` True: KEEP drains it as usual, END ends it at once because it cannot make
progress before it goes). The default relaunches at once on the cheapest
eligible offer anywhere, keeps recently preempted zones out for the job's cool-down, respects max relaunches
and the budget, and falls back to on-demand when spot can no longer meet the deadline.
``orchestrator.policy.recovery.SpotPolicyRecovery`` puts any ``SpotPolicy`` of the simulator (Uniform
Progress, orch's) behind this same interface: the daemon runs the code ``orch simulate`` measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from providers.base import Market


class RecoveryAction(StrEnum):
    RELAUNCH = "relaunch"
    GIVE_UP = "give-up"
    WAIT = "wait"     # no machine for now (spot may come back while the deadline allows): ask again next tick
    KEEP = "keep"     # a running job stays where it is
    END = "end"       # a noticed machine that can save nothing before it goes: end it now rather than drain it


@dataclass(frozen=True, slots=True)
class Preemption:
    at: datetime
    provider: str
    zone: str | None
    region: str


@dataclass(frozen=True, slots=True)
class SpotRun:
    """One spot machine's life as the store recorded it: where, from when to when (None: still running), and
    whether it ended by a preemption (``noticed``: announced by a notice first). A forecasting policy reads
    these as the place's availability history (orchestrator/policy/live_history.py)."""

    place: str
    started_at: datetime
    ended_at: datetime | None
    preempted: bool
    noticed: bool = False


@dataclass(frozen=True, slots=True)
class RecoveryContext:
    now: datetime
    relaunch_count: int
    max_relaunches: int
    markets: frozenset[Market]
    preemptions: Sequence[Preemption]
    cooldown: timedelta
    spent_usd: float = 0.0
    budget_usd: float | None = None
    deadline: datetime | None = None
    remaining_hours: float | None = None      # estimated work left, when the manifest gives hours
    estimated_hours: float | None = None      # the whole job's estimate (the manifest's)
    started_at: datetime | None = None        # when the job was applied: its deadline counts from here
    running_hours: float = 0.0                # hours its machines have run the job so far (progress estimate)
    on_spot: bool | None = None               # True: reviewing a job running on spot; None: it has no machine
    current_place: str | None = None          # where it runs (zone, else region), when on_spot
    current_age_hours: float = 0.0            # how long that machine has run (its restart overhead is in it)
    spot_places: tuple[str, ...] = ()         # zones/regions of its eligible spot offers
    spot_price_ratio: float | None = None     # cheapest eligible spot $/h over cheapest on-demand $/h
    noticed: bool = False                     # the cloud has announced the running spot machine's preemption
    notice_window_hours: float = 0.0          # how long a noticed machine has left (the engine's drain time)
    spot_place_ratios: tuple[float, ...] = ()  # per spot place: its cheapest spot $/h over cheapest on-demand
    spot_runs: tuple[SpotRun, ...] = ()       # the job's spot machines so far, oldest first (its history)
    #: The fleet's spot machines (every job of this owner, this one's too, the last days) in its spot places
    #: on its GPU models, oldest first: those places' history beside the job's own record (a machine in both
    #: counts once). One tuple per tick for all jobs alike (orchestrator/engine/recovery_facts.py).
    fleet_runs: tuple[SpotRun, ...] = ()
    on_demand_hr: float | None = None         # cheapest eligible on-demand $/h for the whole job (None: none)


@dataclass(frozen=True, slots=True)
class RecoveryDecision:
    action: RecoveryAction
    reason: str
    markets: frozenset[Market] = frozenset(Market)
    exclude_places: frozenset[str] = frozenset()


class RecoveryPolicy(Protocol):
    """Decides from a RecoveryContext. A policy with a true class attribute ``uses_history`` gets
    ``ctx.fleet_runs`` filled (the daemon then reads the fleet's spot history once per tick); others get ()
    and cost no read."""

    def decide(self, ctx: RecoveryContext) -> RecoveryDecision: ...


#: Spot must have this much slack over the estimated remaining work, else orch buys on-demand.
DEADLINE_SAFETY = 1.25


def give_up_reason(ctx: RecoveryContext) -> str | None:
    """Why no relaunch may happen at all (max relaunches, budget, deadline passed), or None."""
    if ctx.relaunch_count >= ctx.max_relaunches:
        return f"max relaunches ({ctx.max_relaunches}) reached"
    if ctx.budget_usd is not None and ctx.spent_usd >= ctx.budget_usd:
        return f"budget ${ctx.budget_usd:.2f} spent (${ctx.spent_usd:.2f})"
    if ctx.deadline is not None and ctx.now >= ctx.deadline:
        return f"deadline {ctx.deadline.isoformat()} passed"
    return None


def cooling_places(ctx: RecoveryContext) -> frozenset[str]:
    """Zones (else regions) preempted within the job's cool-down."""
    return frozenset(p.zone or p.region for p in ctx.preemptions if ctx.now - p.at < ctx.cooldown)


class DefaultRecoveryPolicy:
    def decide(self, ctx: RecoveryContext) -> RecoveryDecision:
        if ctx.on_spot:
            return RecoveryDecision(RecoveryAction.KEEP, "keep running (the default moves nothing that runs)")
        stop = give_up_reason(ctx)
        if stop is not None:
            return RecoveryDecision(RecoveryAction.GIVE_UP, stop)
        exclude = cooling_places(ctx)
        markets = ctx.markets
        reason = "preempted: relaunch on the cheapest eligible offer"
        # A deadline outranks the market preference: a spot-only job still falls back to on-demand.
        if Market.SPOT in markets and ctx.deadline is not None and ctx.remaining_hours is not None:
            slack_h = (ctx.deadline - ctx.now).total_seconds() / 3600
            if slack_h < ctx.remaining_hours * DEADLINE_SAFETY:
                markets = frozenset({Market.ON_DEMAND})
                reason = (f"spot cannot meet the deadline ({slack_h:.1f} h left for ~{ctx.remaining_hours:.1f} h of "
                          f"work): falling back to on-demand")
        return RecoveryDecision(RecoveryAction.RELAUNCH, reason, markets, exclude)
