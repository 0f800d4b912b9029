"""How the console writes numbers and times: dollars with cents, $/h, percentages, UTC timestamps, ages.

Every time is shown in UTC and says so; every amount carries its unit.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import quote


def money(usd: float | None) -> str:
    if usd is None:
        return "—"
    if 0 < abs(usd) < 0.01:
        return f"${usd:.4f}"
    return f"${usd:,.2f}"


def money_hr(usd: float | None) -> str:
    return "—" if usd is None else f"{money(usd)}/h"


def pct(fraction: float | None) -> str:
    return "—" if fraction is None else f"{fraction * 100:.0f}%"


def utc(ts: datetime | None, *, seconds: bool = False) -> str:
    """``2026-12-03 14:05 UTC``."""
    if ts is None:
        return "—"
    return ts.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M") + " UTC"


def duration(delta: timedelta) -> str:
    """``45 s``, ``12 min``, ``3 h 05 min``, ``2 d 4 h``."""
    s = int(max(delta.total_seconds(), 0))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def ago(ts: datetime | None, now: datetime) -> str:
    if ts is None:
        return "—"
    if ts > now:
        return "just now"
    return duration(now - ts) + " ago"


def path_segment(text: str) -> str:
    """A job name as one URL path segment (every reserved character quoted)."""
    return quote(text, safe="")
