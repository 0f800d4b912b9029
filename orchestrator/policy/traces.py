"""Spot availability traces: the public format, and zone sets (several zones' traces aligned in time).

File format (skypilot-org/spot-traces): ``{"metadata": {"gap_seconds": N}, "data": [n0, n1, ...]}``; each
value is how many spot instances were available (or still alive) at that tick; > 0 means spot can be had or
kept. Some public files also carry ``"prices": [p0, p1, ...]``, the spot price at each tick in the cloud's
currency (USD per hour). Those are used only when the caller gives the on-demand price to divide them by
(``on_demand_price``); otherwise every zone costs the problem's constant spot price.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.inputs.files import InputFileError, os_error_text, read_text_file
from orchestrator.redaction import shown

#: Bounds on what one trace may ask of the simulator. Public traces hold ~20,000 ticks 30 s to 10 min
#: apart in files of ~200 kB; these caps are far above them and keep any file answerable in seconds.
MAX_TRACE_BYTES = 8 * 1024 * 1024
MAX_TICKS = 1_000_000
MIN_GAP_S = 1.0
MAX_GAP_S = 7 * 86400.0
MAX_TRACE_FILES = 10_000


class TraceError(ValueError):
    """A trace file or set that cannot be read; the message names the file."""


@dataclass(frozen=True, slots=True)
class Trace:
    """One zone's availability: ``available[i]`` for tick i, ``prices[i]`` when the file gives a series."""

    name: str
    gap_seconds: float
    available: tuple[bool, ...]
    prices: tuple[float, ...] | None = None   # relative to on-demand; None: the problem's constant spot price

    @property
    def gap_h(self) -> float:
        return self.gap_seconds / 3600.0

    @property
    def hours(self) -> float:
        return len(self.available) * self.gap_h


@dataclass(frozen=True, slots=True)
class ZoneSet:
    """Zones one job may use, aligned tick by tick (same gap, cut to the shortest trace)."""

    name: str
    zones: tuple[Trace, ...]

    @property
    def gap_h(self) -> float:
        return self.zones[0].gap_h

    @property
    def ticks(self) -> int:
        return len(self.zones[0].available)

    @property
    def hours(self) -> float:
        return self.ticks * self.gap_h


def _name(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:120]}... ({len(text)} characters)"


def load_trace(path: Path, on_demand_price: float | None = None) -> Trace:
    """Read one trace file; any problem raises TraceError naming the file.

    With ``on_demand_price``, the file's ``prices`` series (if any) divided by it becomes the zone's prices.
    """
    try:
        text = read_text_file(path, MAX_TRACE_BYTES, "trace")
    except InputFileError as exc:
        message = "no such trace file" if exc.message == "no such file or directory" else exc.message
        raise TraceError(f"{_name(path)}: {message}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise TraceError(f"{path}: nested too deeply to be a trace "
                         '(expected {"metadata": {"gap_seconds": N}, "data": [...]})') from None
    return parse_trace(doc, path.stem, str(path), on_demand_price)


def parse_trace(doc: object, name: str, where: str, on_demand_price: float | None = None) -> Trace:
    """Validate a decoded trace document; ``where`` names it in errors."""
    if not isinstance(doc, dict) or "data" not in doc or "metadata" not in doc:
        raise TraceError(f'{where}: expected {{"metadata": {{"gap_seconds": N}}, "data": [...]}}')
    meta = doc["metadata"]
    gap = meta.get("gap_seconds") if isinstance(meta, dict) else None
    if isinstance(gap, bool) or not isinstance(gap, int | float) or not math.isfinite(gap) or gap <= 0:
        raise TraceError(f"{where}: metadata.gap_seconds must be a positive number, got {shown(gap, 40)}")
    if not MIN_GAP_S <= gap <= MAX_GAP_S:
        raise TraceError(f"{where}: metadata.gap_seconds is {gap:g}; a trace's ticks are {MIN_GAP_S:g} s to "
                         f"{MAX_GAP_S:g} s apart (public traces: 30 s to 10 min)")
    data = doc["data"]
    if not isinstance(data, list) or not data:
        raise TraceError(f"{where}: data must be a non-empty list of numbers")
    if len(data) > MAX_TICKS:
        raise TraceError(f"{where}: {len(data)} ticks is more than a trace may hold ({MAX_TICKS})")
    for i, value in enumerate(data):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise TraceError(f"{where}: data[{i}] is {shown(value, 40)}, not a number")
    prices: tuple[float, ...] | None = None
    if "prices" in doc and on_demand_price is not None:
        raw = doc["prices"]
        if not isinstance(raw, list) or len(raw) != len(data):
            raise TraceError(f"{where}: prices must be a list as long as data ({len(data)})")
        for i, value in enumerate(raw):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise TraceError(f"{where}: prices[{i}] is {shown(value, 40)}, not a non-negative number")
        prices = tuple(float(v) / on_demand_price for v in raw)
    return Trace(name, float(gap), tuple(v > 0 for v in data), prices)


def zone_set(name: str, traces: Sequence[Trace]) -> ZoneSet:
    """Align ``traces`` into one zone set: they must share the gap; all are cut to the shortest."""
    if not traces:
        raise TraceError(f"{name}: no traces")
    gaps = {t.gap_seconds for t in traces}
    if len(gaps) > 1:
        listed = ", ".join(f"{t.name}={t.gap_seconds:g}s" for t in traces)
        raise TraceError(f"{name}: traces have different gap_seconds ({listed}); a zone set needs one gap")
    n = min(len(t.available) for t in traces)
    cut = tuple(
        Trace(t.name, t.gap_seconds, t.available[:n], t.prices[:n] if t.prices is not None else None)
        for t in traces
    )
    return ZoneSet(name, cut)


def trace_files(directory: Path) -> list[Path]:
    """The ``*.json`` files directly in ``directory``, sorted."""
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix == ".json")


def discover(paths: Iterable[Path], single: bool = True, multi: bool = True,
             on_demand_price: float | None = None) -> list[ZoneSet]:
    """The zone sets that ``paths`` name: each file alone (``single``) and, for every directory holding
    two or more trace files (searched recursively), those files as one zone set (``multi``).

    A file given directly is always a single-zone set. Raises TraceError for a missing path, an empty
    directory, or any unreadable trace.
    """
    sets: list[ZoneSet] = []
    for path in paths:
        try:
            is_dir, exists = path.is_dir(), path.exists()
        except OSError as exc:   # a name too long
            raise TraceError(f"{_name(path)}: {os_error_text(exc)}") from None
        if not exists:
            raise TraceError(f"{_name(path)}: no such file or directory")
        if not is_dir:
            # Anything else is read as a file: the reader refuses FIFOs, devices and missing paths clearly.
            sets.append(ZoneSet(path.stem, (load_trace(path, on_demand_price),)))
            continue
        found = []
        for p in path.rglob("*.json"):
            found.append(p)
            if len(found) > MAX_TRACE_FILES:
                raise TraceError(f"{path}: more than {MAX_TRACE_FILES} trace files under it")
        dirs = sorted({p.parent for p in found if p.is_file()})
        if not dirs:
            raise TraceError(f"{path}: no *.json trace files in it")
        for d in dirs:
            files = trace_files(d)
            traces = [load_trace(f, on_demand_price) for f in files]
            label = d.name if d == path else str(d.relative_to(path))
            if single:
                sets.extend(ZoneSet(f"{label}/{t.name}", (t,)) for t in traces)
            if multi and len(traces) >= 2:
                sets.append(zone_set(f"{label}/*", traces))
    if not sets:
        raise TraceError("no zone sets: with only single files, ask for single-zone sets")
    return sets
