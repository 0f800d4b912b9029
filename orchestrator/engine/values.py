"""Plain values the engine reads and writes through its port: GPU readings, operators' relaunch requests, and
UTC days. No database library here (the store builds these from its rows)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True, slots=True)
class GpuUtilSample:
    """One reading of every GPU of an attempt's machine (percent, 0-100), at ``at`` (aware UTC)."""

    attempt_id: int
    job_id: int
    at: datetime
    gpu_util_pct: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class RelaunchRequest:
    """An operator's "relaunch now" for one job (the web console), as the engine takes it."""

    id: int
    job_id: int
    job_name: str
    requested_at: datetime
    requested_by: str
    taken_at: datetime | None = None


def split_at_midnights(since: datetime, until: datetime) -> list[tuple[datetime, datetime]]:
    """``[since, until)`` cut at each UTC midnight inside it (nothing for an empty interval)."""
    if since.tzinfo is UTC and since < until and until.astimezone(UTC).date() == since.date():
        return [(since, until)]     # within one UTC day: nearly every charge the spend step makes, each tick
    spans: list[tuple[datetime, datetime]] = []
    lo = since
    while lo < until:
        utc = lo.astimezone(UTC)
        midnight = datetime(utc.year, utc.month, utc.day, tzinfo=UTC) + timedelta(days=1)
        hi = min(until, midnight)
        spans.append((lo, hi))
        lo = hi
    return spans
