"""The store's history: committed checkpoints, the event log (redacted, repeats counted on one row) and spend
records. Like every store operation, each takes the caller's transaction's Session
(orchestrator/store/repo.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from orchestrator.clock import utcnow
from orchestrator.engine.events import REPEATING_EVENTS, EventKind
from orchestrator.redaction import safe_line
from orchestrator.store.models import CheckpointRow, Event, Spend


def record_checkpoint(tx: Session, job_id: int, uri: str, *, attempt_id: int | None = None,
                      step: int | None = None, committed_at: datetime | None = None) -> CheckpointRow:
    row = CheckpointRow(job_id=job_id, attempt_id=attempt_id, uri=uri, step=step,
                        committed_at=committed_at or utcnow())
    tx.add(row)
    tx.flush()
    message = f"checkpoint {uri}" + (f" at step {step}" if step is not None else "")
    append_event(tx, EventKind.CHECKPOINT, message, job_id, {"uri": uri, "step": step, "attempt_id": attempt_id},
                 row.committed_at)
    return row


def latest_checkpoint(tx: Session, job_id: int) -> CheckpointRow | None:
    """The most recently committed checkpoint of the job, or None."""
    query = (select(CheckpointRow).where(CheckpointRow.job_id == job_id)
             .order_by(col(CheckpointRow.committed_at).desc(), col(CheckpointRow.id).desc()))
    return tx.exec(query).first()


def record_event(tx: Session, kind: EventKind, message: str = "", *, job_id: int | None = None,
                 data: dict[str, Any] | None = None, ts: datetime | None = None) -> Event:
    """Record one event; ``data`` must be JSON-serialisable. Events are never deleted. ``kind`` must be an
    ``EventKind`` member (or its text): any other string raises ``ValueError``, so no kind is spelled twice.

    A repeat of a condition (kind in ``REPEATING_EVENTS``; same job, kind and message as one of the job's
    events since its last event of another kind) is not a new row: that row's ``count`` rises, its
    ``last_ts`` and ``data`` become this occurrence's. Returns the row written or updated."""
    at = ts or utcnow()
    kind = EventKind(kind)
    if kind in REPEATING_EVENTS and job_id is not None:
        seen = _same_condition(tx, kind, safe_line(message, 4000), job_id)
        if seen is not None:
            seen.count += 1
            seen.last_ts = at
            seen.data = _redacted(data or {})
            tx.add(seen)
            return seen
    return append_event(tx, kind, message, job_id, data or {}, at)


#: How far back a repeat is looked for: a waiting job cycles through a few conditions (one per offer tried).
_REPEAT_LOOKBACK = 16


def _same_condition(tx: Session, kind: EventKind, message: str, job_id: int) -> Event | None:
    """The job's event this one repeats: among its latest events, back to the first of a non-repeating
    kind (a launch, a start, an end: a new episode), the one with this kind and message."""
    query = (select(Event).where(Event.job_id == job_id).order_by(col(Event.id).desc()).limit(_REPEAT_LOOKBACK))
    for row in tx.exec(query):
        if row.kind not in REPEATING_EVENTS:
            return None
        if row.kind == kind and row.message == message:
            return row
    return None


def append_event(tx: Session, kind: EventKind, message: str, job_id: int | None, data: dict[str, Any],
                 ts: datetime) -> Event:
    """Add one event row as it is (no repeat folding: ``record_event`` does that), redacted."""
    # The event log is read by `orch events`/`status` and kept forever: no credential ever goes in, whatever a
    # provider's error message carried.
    # EventKind(...).value: a kind that is not a member raises; the text is stored, whatever the driver makes of
    # enums.
    row = Event(ts=ts, job_id=job_id, kind=EventKind(kind).value, message=safe_line(message, 4000),
                data=_redacted(data))
    tx.add(row)
    return row


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return safe_line(value, 4000)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    return value


def list_events(tx: Session, *, job_id: int | None = None, after_id: int | None = None,
                kinds: Sequence[str] | None = None, limit: int | None = None) -> list[Event]:
    """Events oldest first; ``after_id`` pages forward (tail -f style)."""
    query = select(Event)
    if job_id is not None:
        query = query.where(Event.job_id == job_id)
    if after_id is not None:
        query = query.where(col(Event.id) > after_id)
    if kinds is not None:
        query = query.where(col(Event.kind).in_(list(kinds)))
    query = query.order_by(col(Event.id))
    if limit is not None:
        query = query.limit(limit)
    return list(tx.exec(query))


def record_spend(tx: Session, job_id: int, from_ts: datetime, to_ts: datetime, usd: float, *,
                 attempt_id: int | None = None) -> Spend:
    if to_ts < from_ts:
        raise ValueError("spend interval ends before it starts")
    if usd < 0:
        raise ValueError("spend cannot be negative")
    row = Spend(job_id=job_id, attempt_id=attempt_id, from_ts=from_ts, to_ts=to_ts, usd=usd)
    tx.add(row)
    tx.flush()
    return row


def total_spend(tx: Session, job_id: int) -> float:
    return float(tx.exec(select(func.coalesce(func.sum(Spend.usd), 0.0)).where(Spend.job_id == job_id)).one())


def spend_by_job(tx: Session) -> dict[int, float]:
    """Every job's whole recorded spend, by job id, deleted jobs included (a job with none is absent)."""
    sums = tx.exec(select(Spend.job_id, func.sum(Spend.usd)).group_by(col(Spend.job_id)))  # type: ignore[call-overload]
    return {int(job_id): float(usd or 0.0) for job_id, usd in sums}


def last_spend_until(tx: Session, attempt_id: int) -> datetime | None:
    """Up to when an attempt's spend is recorded: the next record should start here."""
    return tx.exec(select(func.max(Spend.to_ts)).where(Spend.attempt_id == attempt_id)).first()
