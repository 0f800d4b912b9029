"""Budgets as the console shows them: one typed list, whatever sets the budget.

The jobs' own (``policies.budget_usd`` in the manifest, over the job's lifetime), and the budgets of orch's
config ``budgets:`` (orchestrator/money/budgets.py): each one's monthly cap (spent this month) and $/h ceiling
(burning now) as a view of its own, scope GLOBAL (every job) or PROJECT (``match: {project: ...}``):
``configured_views(review)`` passed as ``budget_views(..., configured=...)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from orchestrator.money.budgets import BudgetReview
from orchestrator.store.console_values import JobBudget

#: At this share of a budget the console marks it "near".
NEAR_FRACTION = 0.8


class BudgetScope(StrEnum):
    GLOBAL = "global"
    PROJECT = "project"
    OWNER = "owner"
    JOB = "job"


class BudgetPeriod(StrEnum):
    LIFETIME = "job lifetime"
    MONTHLY = "monthly"
    HOURLY = "$/h now"          # a ceiling on what its jobs' machines burn at once


class BudgetLevel(StrEnum):
    OK = "ok"
    NEAR = "near"
    OVER = "over"


@dataclass(frozen=True, slots=True)
class BudgetView:
    scope: BudgetScope
    name: str
    period: BudgetPeriod
    limit_usd: float
    spent_usd: float

    @property
    def used(self) -> float:
        """Share of the budget spent (may exceed 1)."""
        return self.spent_usd / self.limit_usd if self.limit_usd > 0 else float("inf")

    @property
    def left_usd(self) -> float:
        return self.limit_usd - self.spent_usd

    @property
    def meter(self) -> int:
        """How full its meter is drawn, in twentieths (0-20; a budget overrun draws it full)."""
        return 20 if self.used >= 1 else max(0, math.ceil(self.used * 20))

    @property
    def level(self) -> BudgetLevel:
        if self.used >= 1:
            return BudgetLevel.OVER
        return BudgetLevel.NEAR if self.used >= NEAR_FRACTION else BudgetLevel.OK


@dataclass(frozen=True, slots=True)
class Unbudgeted:
    """A job that sets no budget, and its spend."""

    job: str
    spent_usd: float


@dataclass(frozen=True, slots=True)
class BudgetsPage:
    budgets: tuple[BudgetView, ...]
    unbudgeted: tuple[Unbudgeted, ...]


_SCOPE_ORDER = {BudgetScope.GLOBAL: 0, BudgetScope.PROJECT: 1, BudgetScope.OWNER: 1, BudgetScope.JOB: 2}


def configured_views(review: BudgetReview) -> list[BudgetView]:
    """The config's budgets as views: a monthly one (spent this month of ``monthly_usd``) and an hourly one
    (burning now of ``max_usd_per_hour``) for each limit a budget sets."""
    views: list[BudgetView] = []
    for s in review.standings:
        b = s.budget
        scope = (BudgetScope.PROJECT if b.match.projects else BudgetScope.OWNER if b.match.owners
                 else BudgetScope.GLOBAL)
        matched = sorted(b.match.projects | b.match.owners)
        name = f"{b.name} ({', '.join(matched)})" if matched else b.name
        if b.monthly_usd is not None:
            views.append(BudgetView(scope, name, BudgetPeriod.MONTHLY, b.monthly_usd, s.spent_usd))
        if b.max_usd_per_hour is not None:
            views.append(BudgetView(scope, name, BudgetPeriod.HOURLY, b.max_usd_per_hour, s.burn_hr))
    return views


def budget_views(jobs: Sequence[JobBudget], *, configured: Sequence[BudgetView] = ()) -> BudgetsPage:
    """Configured budgets first (global, then per owner), then each job's own; closest to its limit first
    within a scope."""
    views = [*configured, *(BudgetView(BudgetScope.JOB, j.job, BudgetPeriod.LIFETIME, j.budget_usd, j.spent_usd)
                            for j in jobs if j.budget_usd is not None)]
    views.sort(key=lambda v: (_SCOPE_ORDER[v.scope], -v.used, v.name))
    return BudgetsPage(tuple(views), tuple(Unbudgeted(j.job, j.spent_usd) for j in jobs if j.budget_usd is None))
