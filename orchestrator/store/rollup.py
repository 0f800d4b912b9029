"""The spend ledger rolled up: per job over a window, per UTC day, per attempt; and what burns now.

Budgets, ``orch budgets`` and the console read spend through these functions only, never the ``spend``
rows themselves: how rows are written (one per attempt, UTC day and rate: orchestrator/store/spend_ledger.py)
may change, these answers may not.

A spend row covers ``[from_ts, to_ts)`` at a constant rate, so a row that straddles a window's edge (a
month, a day) counts pro rata: the part inside the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import func
from sqlmodel import Session, col, select

from orchestrator.engine.events import EventKind
from orchestrator.engine.states import FINAL_ATTEMPT_STATES
from orchestrator.store.models import Attempt, Event, InstanceRow, Job, Spend
from providers.base import BURNING_INSTANCE_STATES, Market

#: ``providers.base.BURNING_INSTANCE_STATES`` as the strings the instances table holds (a stopped machine keeps
#: only its disk; gone ones nothing; an unreachable one is still the cloud's and still billed).
BURNING_STATES: tuple[str, ...] = tuple(sorted(s.value for s in BURNING_INSTANCE_STATES))


@dataclass(frozen=True, slots=True)
class JobSpend:
    job_id: int
    usd: float


@dataclass(frozen=True, slots=True)
class DaySpend:
    day: date          # UTC
    job_id: int
    usd: float


@dataclass(frozen=True, slots=True)
class AttemptSpend:
    attempt_id: int | None     # None: rows written without an attempt
    job_id: int
    usd: float
    since: datetime
    until: datetime


@dataclass(frozen=True, slots=True)
class JobBurn:
    """What one job's machines cost per hour now: the cloud's reported price where known, else the offer's."""

    job_id: int
    usd_per_hour: float
    spot_usd_per_hour: float


@dataclass(frozen=True, slots=True)
class JobLabel:
    job_id: int
    name: str
    project: str | None
    owner: str | None = None    # the orch owner of its newest machine (None: it never had one)


def _rows(tx: Session, since: datetime, until: datetime, job_ids: Sequence[int] | None) -> Iterable[Spend]:
    q = select(Spend).where(col(Spend.to_ts) > since, col(Spend.from_ts) < until)
    if job_ids is not None:
        q = q.where(col(Spend.job_id).in_(list(job_ids)))
    return tx.exec(q)


def _inside(row: Spend, since: datetime, until: datetime) -> float:
    """The part of ``row``'s dollars that falls in ``[since, until)``."""
    span = (row.to_ts - row.from_ts).total_seconds()
    if span <= 0:   # an instant: it counts where it happened
        return row.usd if since <= row.from_ts < until else 0.0
    overlap = (min(row.to_ts, until) - max(row.from_ts, since)).total_seconds()
    return row.usd * max(overlap, 0.0) / span


def spend_between(tx: Session, since: datetime, until: datetime, *,
                  job_ids: Sequence[int] | None = None) -> tuple[JobSpend, ...]:
    """Each job's spend in ``[since, until)``, by job id (jobs with none are left out)."""
    totals: dict[int, float] = {}
    for row in _rows(tx, since, until, job_ids):
        usd = _inside(row, since, until)
        if usd > 0:
            totals[row.job_id] = totals.get(row.job_id, 0.0) + usd
    return tuple(JobSpend(job, usd) for job, usd in sorted(totals.items()))


def spend_by_day(tx: Session, since: datetime, until: datetime, *,
                 job_ids: Sequence[int] | None = None) -> tuple[DaySpend, ...]:
    """Spend per UTC day and job in ``[since, until)``, oldest day first."""
    totals: dict[tuple[date, int], float] = {}
    for row in _rows(tx, since, until, job_ids):
        start = max(row.from_ts, since).astimezone(UTC)
        end = min(row.to_ts, until).astimezone(UTC)
        day = start.date()
        while True:
            lo = datetime(day.year, day.month, day.day, tzinfo=UTC)
            hi = lo + timedelta(days=1)
            usd = _inside(row, max(lo, since), min(hi, until))
            if usd > 0:
                totals[(day, row.job_id)] = totals.get((day, row.job_id), 0.0) + usd
            if hi >= end:
                break
            day += timedelta(days=1)
    return tuple(DaySpend(day, job, usd) for (day, job), usd in sorted(totals.items()))


def spend_by_attempt(tx: Session, *, job_id: int | None = None) -> tuple[AttemptSpend, ...]:
    """Each attempt's whole spend and the span it covers, oldest first."""
    q = select(Spend.attempt_id, Spend.job_id, func.sum(Spend.usd), func.min(Spend.from_ts),  # type: ignore[call-overload]
               func.max(Spend.to_ts)).group_by(Spend.attempt_id, Spend.job_id)
    if job_id is not None:
        q = q.where(Spend.job_id == job_id)
    rows = [AttemptSpend(a, j, float(usd), _utc(lo), _utc(hi)) for a, j, usd, lo, hi in tx.exec(q)]
    return tuple(sorted(rows, key=lambda r: (r.since, r.attempt_id or 0)))


def _utc(value: datetime) -> datetime:
    # Aggregates bypass the column type: SQLite hands back naive text-parsed datetimes.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def burn_by_job(tx: Session) -> tuple[JobBurn, ...]:
    """$/h burning now per job: its instances in a billing state that the cloud named or a live attempt
    still asks for (a launch that failed before the cloud answered bills nothing)."""
    from orchestrator.money.spend import charged_price_hr

    asking = set(tx.exec(select(Attempt.launch_id).where(
        col(Attempt.state).not_in([s.value for s in FINAL_ATTEMPT_STATES]))))
    rows = tx.exec(select(InstanceRow).where(col(InstanceRow.state).in_(BURNING_STATES),
                                             col(InstanceRow.job_id).is_not(None)))
    total: dict[int, list[float]] = {}
    for r in rows:
        if not (r.instance_id or r.launch_id in asking) or r.job_id is None:
            continue
        price = charged_price_hr(r.actual_price_hr, float(r.price_hr or 0.0))
        sums = total.setdefault(r.job_id, [0.0, 0.0])
        sums[0] += price
        if r.market == Market.SPOT.value:
            sums[1] += price
    return tuple(JobBurn(job, usd, spot) for job, (usd, spot) in sorted(total.items()))


def job_labels(tx: Session, job_ids: Sequence[int] | None = None) -> tuple[JobLabel, ...]:
    """Jobs' names, projects (the manifest's ``project:``) and owners (of their newest machine), every job
    when ``job_ids`` is None."""
    q = select(Job.id, Job.name, Job.manifest)  # type: ignore[call-overload]
    owned = select(InstanceRow.job_id, InstanceRow.owner).order_by(col(InstanceRow.id))  # type: ignore[call-overload]
    if job_ids is not None:
        q = q.where(col(Job.id).in_(list(job_ids)))
        owned = owned.where(col(InstanceRow.job_id).in_(list(job_ids)))
    owners = dict(tx.exec(owned).all())      # the newest row per job wins
    out: list[JobLabel] = []
    for job_id, name, manifest in tx.exec(q):
        project = manifest.get("project") if isinstance(manifest, dict) else None
        out.append(JobLabel(int(job_id), name, project if isinstance(project, str) else None, owners.get(job_id)))
    return tuple(out)


def events_since(tx: Session, kind: EventKind, since: datetime) -> tuple[Event, ...]:
    """Events of one kind at or after ``since`` (e.g. this month's budget alerts), oldest first."""
    return tuple(tx.exec(select(Event).where(Event.kind == kind.value, col(Event.ts) >= since)
                         .order_by(col(Event.id))))
