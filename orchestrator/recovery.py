"""What to do after a preemption: the recovery policy, behind one small interface.

The daemon gathers the facts (RecoveryContext); a RecoveryPolicy returns a decision. The default
relaunches at once on the cheapest eligible offer anywhere, keeps recently preempted zones out for
the job's cool-down, respects max relaunches and the budget, and falls back to on-demand when spot
can no longer meet the deadline. A deadline-aware spot policy (Uniform Progress) can replace it.
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


@dataclass(frozen=True, slots=True)
class Preemption:
    at: datetime
    provider: str
    zone: str | None
    region: str


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


@dataclass(frozen=True, slots=True)
class RecoveryDecision:
    action: RecoveryAction
    reason: str
    markets: frozenset[Market] = frozenset(Market)
    exclude_places: frozenset[str] = frozenset()


class RecoveryPolicy(Protocol):
    def decide(self, ctx: RecoveryContext) -> RecoveryDecision: ...


#: Spot must have this much slack over the estimated remaining work, else orch buys on-demand.
DEADLINE_SAFETY = 1.25


class DefaultRecoveryPolicy:
    def decide(self, ctx: RecoveryContext) -> RecoveryDecision:
        if ctx.relaunch_count >= ctx.max_relaunches:
            return RecoveryDecision(RecoveryAction.GIVE_UP, f"max relaunches ({ctx.max_relaunches}) reached")
        if ctx.budget_usd is not None and ctx.spent_usd >= ctx.budget_usd:
            return RecoveryDecision(RecoveryAction.GIVE_UP,
                                    f"budget ${ctx.budget_usd:.2f} spent (${ctx.spent_usd:.2f})")
        if ctx.deadline is not None and ctx.now >= ctx.deadline:
            return RecoveryDecision(RecoveryAction.GIVE_UP, f"deadline {ctx.deadline.isoformat()} passed")
        exclude = frozenset(
            place for p in ctx.preemptions if ctx.now - p.at < ctx.cooldown for place in (p.zone or p.region,)
        )
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
