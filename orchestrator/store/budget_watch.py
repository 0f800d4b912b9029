"""Budgets against the store: the ledger of one instant, and the review that records threshold alerts.

``read_ledger`` gathers the facts ``orchestrator.money.budgets`` decides on (this month's spend per job from the
spend rollup, $/h burning now, thresholds already alerted); ``review_budgets`` reviews them and writes a
``budget-threshold`` event for each threshold crossed for the first time this month, in the same
transaction, so a threshold is alerted once per month even across daemon restarts (the alert itself is
sent by the store's event listener, orchestrator.alerts). The engine's budget step and ``orch budgets``
both come through here. Several daemons on one PostgreSQL database each review every budget each tick: the
review takes a transaction-scoped advisory lock first, so a second daemon reads the first one's event and
does not alert the same threshold again (SQLite has one writer, its daemon lock, already).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from orchestrator.engine.events import EventKind
from orchestrator.money.budget_launch import RefusedLimits, refused_limits_from
from orchestrator.money.budgets import (
    Budget,
    BudgetLedger,
    BudgetReview,
    JobFacts,
    alerted_from,
    month_label,
    month_start,
    review,
)

if TYPE_CHECKING:
    from sqlmodel import Session

    from orchestrator.store import Store

#: One budget review at a time on a PostgreSQL database ("orchb"), held until the review's transaction ends.
_PG_REVIEW_LOCK = 0x6F726368_62
_PG_LAUNCH_LOCK = 0x6F726368_6C

# Events: EventKind.BUDGET_THRESHOLD for a crossed threshold (once per threshold per month); BUDGET_OVERRUN and
# BUDGET_OVERRUN_ENDED when a budget's burn goes over its $/h ceiling and back (launches reserve their $/h under
# a lock, so only a price the cloud raised or a ceiling lowered under running machines gets there): one event
# each per change, across daemons (written in the serialised review). Both alert as budget-threshold.


def read_ledger(tx: Session, now: datetime) -> BudgetLedger:
    """Spend this calendar month and burn now for every job that has either; thresholds alerted this month."""
    from orchestrator.store import rollup

    start = month_start(now)
    spent = {s.job_id: s.usd for s in rollup.spend_between(tx, start, now)}
    burn = {b.job_id: b.usd_per_hour for b in rollup.burn_by_job(tx)}
    labels = rollup.job_labels(tx, sorted(set(spent) | set(burn)))
    jobs = tuple(JobFacts(j.job_id, j.name, j.project, spent.get(j.job_id, 0.0), burn.get(j.job_id, 0.0), j.owner)
                 for j in labels)
    events = rollup.events_since(tx, EventKind.BUDGET_THRESHOLD, start)
    return BudgetLedger(now, jobs, alerted_from([dict(e.data or {}) for e in events], month_label(now)))


def review_budgets(store: Store, budgets: Sequence[Budget], now: datetime) -> BudgetReview:
    """Review every budget at ``now`` and record each newly crossed threshold as an event (one transaction)."""
    from orchestrator.store import repo

    with store.transaction() as tx:
        _serialise_reviews(tx)
        result = review(budgets, read_ledger(tx, now))
        for crossing in result.crossings:
            repo.record_event(tx, EventKind.BUDGET_THRESHOLD, crossing.message(), data=crossing.data(), ts=now)
        _report_overruns(tx, result, now)
    return result


def _report_overruns(tx: Session, result: BudgetReview, now: datetime) -> None:
    """One ``budget-overrun`` event when a budget's burn goes over its ceiling, one ``budget-overrun-ended``
    when it is back under (the latest of the two, per budget, is the state: read back, not remembered)."""
    from orchestrator.store import repo, rollup

    ceilinged = [s for s in result.standings if s.budget.max_usd_per_hour is not None]
    if not ceilinged:
        return
    since = month_start(now) - timedelta(days=366)     # an overrun older than a year is reported again
    kinds = (EventKind.BUDGET_OVERRUN, EventKind.BUDGET_OVERRUN_ENDED)
    events = sorted((e for kind in kinds for e in rollup.events_since(tx, kind, since)),
                    key=lambda e: e.id or 0)
    was_over = {str((e.data or {}).get("budget")): e.kind == EventKind.BUDGET_OVERRUN for e in events}
    for s in ceilinged:
        if s.over_ceiling == was_over.get(s.budget.name, False):
            continue
        data = {"budget": s.budget.name, "burn_usd_per_hour": round(s.burn_hr, 4),
                "max_usd_per_hour": s.budget.max_usd_per_hour}
        if s.over_ceiling:
            repo.record_event(tx, EventKind.BUDGET_OVERRUN,
                              f"budget {s.budget.name}: ${s.burn_hr:,.2f}/h running, over its "
                              f"ceiling of ${s.budget.max_usd_per_hour:,.2f}/h", data=data, ts=now)
        else:
            repo.record_event(tx, EventKind.BUDGET_OVERRUN_ENDED,
                              f"budget {s.budget.name}: ${s.burn_hr:,.2f}/h running, back "
                              f"under its ceiling of ${s.budget.max_usd_per_hour:,.2f}/h", data=data, ts=now)


def serialise_launches(tx: Session) -> None:
    """On PostgreSQL, wait for any other daemon's budget check and reservation to commit (READ COMMITTED
    then shows its planned attempt): a check and its reservation are one step across daemons. SQLite has
    one writer (and one daemon per file)."""
    if tx.get_bind().dialect.name == "postgresql":
        from sqlalchemy import text

        tx.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LAUNCH_LOCK})


def _serialise_reviews(tx: Session) -> None:
    """On PostgreSQL, wait for any other daemon's review to commit (READ COMMITTED then shows its events)."""
    if tx.get_bind().dialect.name == "postgresql":
        from sqlalchemy import text

        tx.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_REVIEW_LOCK})


def standings(store: Store, budgets: Sequence[Budget], now: datetime) -> BudgetReview:
    """The review without recording anything (``orch budgets``)."""
    with store.transaction() as tx:
        return review(budgets, read_ledger(tx, now))


def last_refusal(tx: Session, job_id: int) -> RefusedLimits | None:
    """The limits the job's newest ``budget-refused`` event names, if no attempt of the job was planned
    since (a launch since makes the next refusal news again); None otherwise. What a daemon that did not
    write that refusal (restarted, or another one of a fleet) reads before writing the same refusal again."""
    from sqlmodel import col, func, select

    from orchestrator.store.models import Attempt, Event

    event = tx.exec(select(Event).where(Event.job_id == job_id, Event.kind == EventKind.BUDGET_REFUSED.value)
                    .order_by(col(Event.id).desc()).limit(1)).first()
    if event is None:
        return None
    planned = tx.exec(select(func.max(Attempt.created_at)).where(Attempt.job_id == job_id)).one()
    if planned is not None and planned >= event.ts:    # a launch planned since (or in the same tick: news)
        return None
    return refused_limits_from(event.data)
