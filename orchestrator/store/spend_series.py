"""Spend over time from the ledger: per job and per provider, in equal UTC buckets, from rows of any length.

The ledger (table ``spend``) holds one row per attempt per interval: a tick's seconds today, an attempt's day
once it is rolled up. Each row's dollars are spread over the buckets its interval overlaps, in proportion,
so the answer does not depend on how the ledger is cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlmodel import Session, col, select

from orchestrator.store.models import Attempt, InstanceRow, Job, Spend

#: The provider of ledger rows whose attempt (or its instance) is not known.
UNKNOWN_PROVIDER = "unknown"


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    values: tuple[float, ...]        # USD per bucket

    @property
    def total(self) -> float:
        return sum(self.values)


@dataclass(frozen=True, slots=True)
class SpendSeries:
    """Spend in equal buckets starting at ``starts[i]`` (each ``step`` long), per job and per provider."""

    starts: tuple[datetime, ...]
    step: timedelta
    by_job: tuple[Series, ...]
    by_provider: tuple[Series, ...]

    @property
    def total(self) -> float:
        return sum(s.total for s in self.by_job)


def bucket_starts(since: datetime, until: datetime, step: timedelta) -> tuple[datetime, ...]:
    """Bucket starts from ``since`` rounded down to a multiple of ``step`` (counted from the Unix epoch,
    so hour and day buckets start on UTC hours and midnights) up to ``until``."""
    if step <= timedelta(0):
        raise ValueError("step must be positive")
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    first = epoch + ((since - epoch) // step) * step
    starts = []
    t = first
    while t < until:
        starts.append(t)
        t += step
    return tuple(starts)


def spend_series(tx: Session, *, since: datetime, until: datetime, step: timedelta) -> SpendSeries:
    """Spend per bucket, per job and per provider, from the ledger.

    Works on rows of any granularity (a tick's interval, an attempt's day once the ledger is rolled up):
    each row's dollars are spread over the buckets its [from_ts, to_ts) interval overlaps, in proportion
    to the overlap; a row of no length counts in the bucket of its instant. Only rows overlapping
    [since, until) are read. A row's provider is its attempt's instance's; rows without one count as
    ``unknown``."""
    starts = bucket_starts(since, until, step)
    if not starts:
        return SpendSeries((), step, (), ())
    lo, hi = starts[0], starts[-1] + step
    query = (select(Spend.from_ts, Spend.to_ts, Spend.usd, Job.name, InstanceRow.provider)  # type: ignore[call-overload]
             .join(Job, col(Job.id) == col(Spend.job_id))
             .join(Attempt, col(Attempt.id) == col(Spend.attempt_id), isouter=True)
             .join(InstanceRow, col(InstanceRow.launch_id) == col(Attempt.launch_id), isouter=True)
             .where(col(Spend.to_ts) >= lo, col(Spend.from_ts) < hi))
    by_job: dict[str, list[float]] = {}
    by_provider: dict[str, list[float]] = {}
    for from_ts, to_ts, usd, job, provider in tx.exec(query).all():
        for index, share in _spread(from_ts, to_ts, float(usd), lo, step, len(starts)):
            by_job.setdefault(job, [0.0] * len(starts))[index] += share
            by_provider.setdefault(provider or UNKNOWN_PROVIDER, [0.0] * len(starts))[index] += share
    return SpendSeries(starts, step, _series(by_job), _series(by_provider))


def _spread(start: datetime, end: datetime, usd: float, lo: datetime, step: timedelta,
            n: int) -> Iterable[tuple[int, float]]:
    """(bucket index, dollars) for one ledger row over buckets [lo + i*step, lo + (i+1)*step), i < n."""
    length = (end - start).total_seconds()
    if length <= 0:
        index = (start - lo) // step
        if 0 <= index < n:
            yield index, usd
        return
    first = max(0, (start - lo) // step)
    last = min(n - 1, (end - lo) // step)
    for index in range(first, last + 1):
        b_start = lo + index * step
        overlap = (min(end, b_start + step) - max(start, b_start)).total_seconds()
        if overlap > 0:
            yield index, usd * overlap / length


def _series(values: Mapping[str, list[float]]) -> tuple[Series, ...]:
    """Largest total first, then by name."""
    return tuple(sorted((Series(k, tuple(v)) for k, v in values.items()), key=lambda s: (-s.total, s.name)))
