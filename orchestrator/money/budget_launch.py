"""A launch against the budgets: ``check_launch`` -> ``BudgetVerdict`` (may it go ahead? if not, each budget it
would break, and by how much), and which limits a refusal names (what must change for the next refusal to be
news). Pure, like ``orchestrator.money.budgets``, whose values it reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.money.budgets import Budget, BudgetLedger, BudgetLimit, usd


@dataclass(frozen=True, slots=True)
class Refusal:
    """One budget a launch would break, and by how much."""

    budget: str
    limit: BudgetLimit
    limit_usd: float
    current_usd: float      # $/h burning now (HOURLY) or spent this month (MONTHLY)
    adding_usd: float       # the launch's $/h (HOURLY) or its estimated cost until the month ends (MONTHLY)

    def message(self) -> str:
        if self.limit is BudgetLimit.HOURLY:
            return (f"budget {self.budget}: {usd(self.current_usd)}/h running + {usd(self.adding_usd)}/h would "
                    f"exceed its ceiling of {usd(self.limit_usd)}/h")
        return (f"budget {self.budget}: {usd(self.current_usd)} spent this month + ~{usd(self.adding_usd)} for this "
                f"launch would exceed its monthly cap of {usd(self.limit_usd)}")


@dataclass(frozen=True, slots=True)
class BudgetVerdict:
    refusals: tuple[Refusal, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.refusals

    def reason(self) -> str:
        return "; ".join(r.message() for r in self.refusals)


def check_launch(budgets: Sequence[Budget], ledger: BudgetLedger, *, project: str | None, price_hr: float,
                 hours: float | None, owner: str | None = None) -> BudgetVerdict:
    """May a launch at ``price_hr`` (all its nodes) for a job of ``project``, by orch owner ``owner``, go
    ahead? ``hours``: the job's estimated run time (None: one hour), counted up to the end of the month for
    the monthly cap."""
    if price_hr <= 0:
        return BudgetVerdict()
    cost = price_hr * min(max(hours or 1.0, 0.0), ledger.hours_left_in_month())
    refusals: list[Refusal] = []
    for budget in budgets:
        if not budget.match.covers(project, owner):
            continue
        if budget.max_usd_per_hour is not None:
            burn = ledger.burn(budget)
            if burn + price_hr > budget.max_usd_per_hour + 1e-9:
                refusals.append(Refusal(budget.name, BudgetLimit.HOURLY, budget.max_usd_per_hour, burn, price_hr))
        if budget.monthly_usd is not None:
            spent = ledger.spent(budget)
            if spent >= budget.monthly_usd or spent + cost > budget.monthly_usd + 1e-9:
                refusals.append(Refusal(budget.name, BudgetLimit.MONTHLY, budget.monthly_usd, spent, cost))
    return BudgetVerdict(tuple(refusals))


#: Which limits refused a job: (budget name, limit) pairs. A refusal is written again only when these change.
RefusedLimits = frozenset[tuple[str, BudgetLimit]]


def refused_limits(refusals: Sequence[Refusal]) -> RefusedLimits:
    """The (budget, limit) pairs of ``refusals``: what must change for a refusal to be news."""
    return frozenset((r.budget, r.limit) for r in refusals)


def refused_limits_from(data: Mapping[str, object]) -> RefusedLimits | None:
    """The pairs a ``budget-refused`` event's data names (``engine.budget.refusal_data``'s shape); None where
    the data is not of that shape (an event no engine of this version wrote)."""
    refusals = data.get("refusals")
    if not isinstance(refusals, list) or not refusals:
        return None
    pairs: set[tuple[str, BudgetLimit]] = set()
    for r in refusals:
        budget = r.get("budget") if isinstance(r, Mapping) else None
        limit = r.get("limit") if isinstance(r, Mapping) else None
        if not isinstance(budget, str) or not isinstance(limit, str):
            return None
        try:
            pairs.add((budget, BudgetLimit(limit)))
        except ValueError:
            return None
    return frozenset(pairs)
