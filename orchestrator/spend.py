"""Spend accrual: an attempt costs its offer's $/h for the time its instance was running (all nodes)."""

from __future__ import annotations

from datetime import datetime


def accrued_usd(price_hr: float, since: datetime, until: datetime) -> float:
    """USD for ``price_hr`` between two instants; zero for an empty or inverted interval."""
    seconds = (until - since).total_seconds()
    return price_hr * max(seconds, 0.0) / 3600.0


def would_break_budget(spent_usd: float, price_hr: float, hours: float, budget_usd: float | None) -> bool:
    """True when launching at ``price_hr`` for ``hours`` (at least one hour is assumed) exceeds the budget."""
    if budget_usd is None:
        return False
    return spent_usd + price_hr * max(hours, 1.0) > budget_usd
