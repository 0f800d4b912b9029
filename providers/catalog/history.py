"""Price history: what each refresh changed, kept compactly, and a GPU's price trend per provider.

``<user catalog dir>/history.csv`` is append-only. A refresh appends one line per offer whose price is new or
moved (and one with an empty price per offer that went away), so an unchanged catalog costs nothing and a
year of 6-hourly refreshes stays small. Replaying the lines in order rebuilds every refresh's catalog; the
trend of a GPU is, per provider and market, its cheapest $/GPU-hour after each refresh.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from providers.base import Offer

HISTORY_FILE = "history.csv"
COLUMNS = ("captured_at", "provider", "instance_type", "region", "zone", "market", "gpu", "gpu_count", "price_hr")

Key = tuple[str, str, str, str | None, str]


def _key(o: Offer) -> Key:
    return (o.provider, o.instance_type, o.region, o.zone, o.market.value)


def changes(previous: Iterable[Offer], current: Iterable[Offer], when: datetime) -> list[list[str]]:
    """History lines for what moved between two catalogs of one provider: new or repriced offers (at their
    price), and offers gone (empty price), all stamped ``when``."""
    before = {_key(o): o for o in previous}
    now = {_key(o): o for o in current}
    # Microseconds: two refreshes within one second are still two points of the trend.
    stamp = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lines: list[list[str]] = []
    for key, o in now.items():
        old = before.get(key)
        if old is None or abs(old.price_hr - o.price_hr) > 1e-9:
            lines.append([stamp, *(k or "" for k in key), o.gpu, str(o.gpu_count), repr(round(o.price_hr, 6))])
    for key, o in before.items():
        if key not in now:
            lines.append([stamp, *(k or "" for k in key), o.gpu, str(o.gpu_count), ""])
    return lines


def append(directory: Path, lines: Sequence[list[str]]) -> None:
    """Append ``lines`` in one write (a reader skips a torn last line)."""
    if not lines:
        return
    path = directory / HISTORY_FILE
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if not path.exists():
        writer.writerow(COLUMNS)
    writer.writerows(lines)
    with path.open("a", newline="") as f:
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())


@dataclass(frozen=True, slots=True)
class TrendPoint:
    at: datetime
    price_per_gpu_hr: float


@dataclass(frozen=True, slots=True)
class Trend:
    """One provider's cheapest $/GPU-hour for a GPU in one market, after each refresh that touched it."""

    provider: str
    market: str
    points: tuple[TrendPoint, ...]

    @property
    def first(self) -> float:
        return self.points[0].price_per_gpu_hr

    @property
    def last(self) -> float:
        return self.points[-1].price_per_gpu_hr


def _read(directory: Path, gpu: str, count: int | None) -> list[list[str]]:
    path = directory / HISTORY_FILE
    try:
        text = path.read_text()
    except OSError:
        return []
    rows = []
    for row in csv.reader(io.StringIO(text)):
        if len(row) != len(COLUMNS) or row[0] == COLUMNS[0] or row[6] != gpu:
            continue
        if count is not None and row[7] != str(count):
            continue
        rows.append(row)
    return rows


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _when(stamp: str) -> datetime | None:
    """A line's capture time (whole seconds as older refreshes wrote it, or microseconds)."""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def trend(directory: Path, gpu: str, count: int | None = None) -> list[Trend]:
    """Per (provider, market): the cheapest $/GPU-hour of ``gpu`` (``count`` GPUs per machine, or any) after
    each refresh recorded in the history, oldest first. A torn or foreign line is skipped."""
    live: dict[Key, float] = {}
    series: dict[tuple[str, str], list[TrendPoint]] = {}
    rows = sorted(_read(directory, gpu, count), key=lambda r: _when(r[0]) or _EPOCH)
    i = 0
    while i < len(rows):
        stamp = rows[i][0]
        touched: set[tuple[str, str]] = set()
        while i < len(rows) and rows[i][0] == stamp:
            _, provider, itype, region, zone, market, _, gpus, price = rows[i]
            key: Key = (provider, itype, region, zone or None, market)
            try:
                if price:
                    live[key] = float(price) / int(gpus)
                else:
                    live.pop(key, None)
            except (ValueError, ZeroDivisionError):
                pass
            touched.add((provider, market))
            i += 1
        when = _when(stamp)
        if when is None:
            continue
        for provider, market in touched:
            prices = [p for k, p in live.items() if k[0] == provider and k[4] == market]
            if prices:
                series.setdefault((provider, market), []).append(TrendPoint(when, min(prices)))
    return [Trend(p, m, tuple(points)) for (p, m), points in sorted(series.items())]


__all__ = ["HISTORY_FILE", "Trend", "TrendPoint", "append", "changes", "trend"]
