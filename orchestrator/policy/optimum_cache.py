"""A disk cache of the offline optimum's values, keyed by the traces' contents (not their names or paths).

The optimum is the dearest part of ``orch simulate`` (a DP per zone set) and depends only on the zone set's
availability and prices, the problem (C, D, d, k), the start ticks and the DP's grid; so its values are kept
under a SHA-256 of exactly those, and a trace edited in place gets a new key. Entries are small JSON files,
written to a temporary name and renamed (a reader never sees half of one); a file that cannot be read or
parsed is treated as missing. ``KEY_VERSION`` changes whenever the DP's result for the same input could.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path

from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.traces import ZoneSet

KEY_VERSION = "optimum-v1"


def default_dir() -> Path:
    """$ORCH_CACHE_DIR/optimum, else $XDG_CACHE_HOME/orch/optimum, else ~/.cache/orch/optimum."""
    if os.environ.get("ORCH_CACHE_DIR"):
        return Path(os.environ["ORCH_CACHE_DIR"]) / "optimum"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "orch" / "optimum"


def key(spec: ProblemSpec, zones: ZoneSet, starts: Sequence[int], max_levels: int) -> str:
    """SHA-256 over the DP's whole input: the key changes when any tick of any zone, a price, the problem,
    a start or the grid does (the set's name is not part of it: a copy of a trace shares its entry)."""
    h = hashlib.sha256(KEY_VERSION.encode())
    h.update(struct.pack("<4d", spec.work_h, spec.deadline_h, spec.overhead_h, spec.spot_price))
    h.update(struct.pack("<d2q", zones.gap_h, max_levels, len(zones.zones)))
    h.update(struct.pack(f"<{len(starts)}q", *starts))
    for trace in zones.zones:
        avail = trace.available[: zones.ticks]
        h.update(struct.pack("<q", len(avail)))
        h.update(bytes(avail))
        if trace.prices is None:
            h.update(b"-")
        else:
            prices = trace.prices[: zones.ticks]
            h.update(b"p" + struct.pack(f"<{len(prices)}d", *prices))
    return h.hexdigest()


def load(directory: Path, entry: str, count: int) -> list[float | None] | None:
    """The cached normalized costs for ``entry`` (one per start), or None if missing or unreadable."""
    try:
        values = json.loads((directory / f"{entry}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(values, list) or len(values) != count \
            or not all(v is None or isinstance(v, (int, float)) for v in values):
        return None
    return [None if v is None else float(v) for v in values]


def store(directory: Path, entry: str, values: Sequence[float | None]) -> None:
    """Keep ``values`` under ``entry``; a cache that cannot be written is skipped (it only saves time)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{entry}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(list(values)))
        tmp.replace(directory / f"{entry}.json")
    except OSError:
        return
