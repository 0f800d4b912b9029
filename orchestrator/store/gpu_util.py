"""Stored GPU utilization: per attempt, per UTC minute, the mean and max of the agent's readings.

The engine keeps its idle windows in memory; this table is what outlives a tick, for the console's
sparklines and for a restarted daemon's idle windows (``readings_since``). It stays small: one row per machine
per minute, pruned after ``DEFAULT_RETENTION``.

The engine calls ``record_gpu_util`` with the tick's readings (several attempts at once, so a buffered
flush costs one transaction); readers call ``util_since``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete
from sqlmodel import Session, col, select

from orchestrator.engine.values import GpuUtilSample
from orchestrator.store.models import GpuUtilMinute

#: How long per-minute rows are kept. The console shows the last hour; a day leaves room for a longer view.
DEFAULT_RETENTION = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class UtilMinute:
    """One stored minute of one attempt."""

    attempt_id: int
    minute: datetime
    samples: int
    mean_pct: float
    max_pct: float


def minute_of(at: datetime) -> datetime:
    """The UTC minute ``at`` falls in (seconds and microseconds dropped)."""
    if at.tzinfo is None:
        raise ValueError("naive datetime; pass an aware (UTC) datetime")
    return at.replace(second=0, microsecond=0)


def _clamp(pct: float) -> float:
    # An agent reading outside 0-100 (or NaN) is a broken sensor, not utilization: clamp it, never store NaN.
    if math.isnan(pct):
        return 0.0
    return min(max(float(pct), 0.0), 100.0)


def record_gpu_util(tx: Session, samples: Sequence[GpuUtilSample], *,
                    retention: timedelta = DEFAULT_RETENTION) -> int:
    """Fold ``samples`` into their attempts' per-minute rows and prune rows older than ``retention`` before
    the newest sample. Samples with no GPU readings are skipped. Returns the number of rows pruned.

    Idempotence: a sample folded twice counts twice (the engine records each reading once, per tick).
    """
    readings = [s for s in samples if s.gpu_util_pct]
    if not readings:
        return 0
    folded: dict[tuple[int, datetime], tuple[int, int, float, float]] = {}
    for s in readings:
        values = [_clamp(v) for v in s.gpu_util_pct]
        key = (s.attempt_id, minute_of(s.at))
        job_id, n, total, peak = folded.get(key, (s.job_id, 0, 0.0, 0.0))
        folded[key] = (job_id, n + 1, total + sum(values) / len(values), max(peak, max(values)))
    attempt_ids = sorted({a for a, _ in folded})
    minutes = sorted({m for _, m in folded})
    existing = {(r.attempt_id, r.minute): r for r in tx.exec(
        select(GpuUtilMinute).where(col(GpuUtilMinute.attempt_id).in_(attempt_ids),
                                    col(GpuUtilMinute.minute).in_(minutes)))}
    for (attempt_id, minute), (job_id, n, total, peak) in folded.items():
        row = existing.get((attempt_id, minute))
        if row is None:
            tx.add(GpuUtilMinute(attempt_id=attempt_id, job_id=job_id, minute=minute, samples=n,
                                 mean_pct=total / n, max_pct=peak))
            continue
        count = row.samples + n
        row.mean_pct = (row.mean_pct * row.samples + total) / count
        row.max_pct = max(row.max_pct, peak)
        row.samples = count
        tx.add(row)
    tx.flush()
    return prune_gpu_util(tx, before=max(minutes) - retention)


def prune_gpu_util(tx: Session, *, before: datetime) -> int:
    """Delete every minute row older than ``before``; returns how many went."""
    result = tx.execute(delete(GpuUtilMinute).where(col(GpuUtilMinute.minute) < before))
    return int(getattr(result, "rowcount", 0) or 0)


def _minutes_since(tx: Session, attempt_ids: Sequence[int], since: datetime) -> Sequence[GpuUtilMinute]:
    """The stored minute rows of these attempts from ``since``'s minute on, per attempt oldest first."""
    if not attempt_ids:
        return []
    return tx.exec(select(GpuUtilMinute)
                   .where(col(GpuUtilMinute.attempt_id).in_(list(attempt_ids)),
                          col(GpuUtilMinute.minute) >= minute_of(since))
                   .order_by(col(GpuUtilMinute.attempt_id), col(GpuUtilMinute.minute))).all()


def util_since(tx: Session, attempt_ids: Sequence[int], since: datetime) -> list[UtilMinute]:
    """The stored minutes of these attempts from ``since`` on, per attempt oldest first."""
    return [UtilMinute(r.attempt_id, r.minute, r.samples, r.mean_pct, r.max_pct)
            for r in _minutes_since(tx, attempt_ids, since)]


def readings_since(tx: Session, attempt_ids: Sequence[int], since: datetime) -> list[GpuUtilSample]:
    """The stored minutes of these attempts from ``since`` on as readings, for a restarted engine's idle windows:
    one per minute, its highest reading, at the minute's last second (never earlier than a reading it stands
    for, so a window it covers was watched at least that long; never lower, so no busy GPU is hidden)."""
    return [GpuUtilSample(r.attempt_id, r.job_id, _aware(r.minute) + _LAST_SECOND, (r.max_pct,))
            for r in _minutes_since(tx, attempt_ids, since)]


_LAST_SECOND = timedelta(seconds=59)


def _aware(at: datetime) -> datetime:
    """SQLite hands back naive datetimes: the store writes UTC."""
    from datetime import UTC

    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
