"""Spend accrual: an attempt costs its $/h for the time its instance was running (all nodes): what the cloud
reports for the instance where it reports it, else the offer's price."""

from __future__ import annotations

import math
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


def charged_price_hr(instance_price_hr: float | None, offer_price_hr: float) -> float:
    """The $/h to charge for an attempt: the instance's price as its cloud reports it (Vast ``dph_total``,
    RunPod ``costPerHr``, Lambda ``price_cents_per_hour``, the AWS zone's spot price at launch, the refreshed
    catalog's price at launch on Azure/GCP), else the offer's. A reported price that is not a finite
    non-negative number is no report."""
    if instance_price_hr is None or not (instance_price_hr >= 0) or instance_price_hr == float("inf"):
        return offer_price_hr
    return instance_price_hr


def reported_price_hr(value: float | None) -> float | None:
    """A cloud's reported $/h if it is one (a finite non-negative number), else None."""
    return value if value is not None and math.isfinite(value) and value >= 0 else None
