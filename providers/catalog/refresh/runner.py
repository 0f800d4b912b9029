"""``refresh``: fetch each provider's current prices and write them to the user catalog, one provider at a time.

Each provider is fetched in its own thread, with a deadline (``provider_timeout_s``). Only then is anything
written, under a lock file: for every provider whose steps all succeeded and whose rows pass the checks, its
file (``offers-<provider>.csv``) is replaced atomically (temp file + ``os.replace``) and what changed is
appended to the price history. A provider that failed (an error, a timeout, garbage, no rows) is not touched:
its previous file stays byte for byte, and the report says which provider failed and why.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from providers.base import Market, Offer
from providers.catalog import history
from providers.catalog.fileformat import CatalogFileError, read_offers, render, write_atomic
from providers.catalog.layers import newest_per_key
from providers.catalog.loader import rebuild_index, user_catalog_dir, user_catalog_file
from providers.catalog.refresh.aws_spot import AwsZoneSpot
from providers.catalog.refresh.azure_source import AzureRetail
from providers.catalog.refresh.gpuhunt_source import GpuhuntArchive
from providers.catalog.refresh.live_sources import LambdaInstanceTypes, RunpodGpuTypes
from providers.catalog.refresh.model import (
    REFRESH_PROVIDERS,
    Outcome,
    ProviderReport,
    RefreshContext,
    RefreshReport,
    RefreshSettings,
    SourceError,
    SourceSkipped,
    Step,
)
from providers.catalog.refresh.vast_source import VastBundles

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Each provider's steps: the first fetches every row, the others adjust them (see model.py).
PLANS: dict[str, tuple[Step, ...]] = {
    "aws": (GpuhuntArchive("aws"), AwsZoneSpot()),
    "gcp": (GpuhuntArchive("gcp"),),
    "azure": (GpuhuntArchive("azure"), AzureRetail()),
    "runpod": (GpuhuntArchive("runpod"), RunpodGpuTypes()),
    "vastai": (VastBundles(),),
    "lambda": (GpuhuntArchive("lambda"), LambdaInstanceTypes()),
}
STATE_FILE = "refresh.json"

Progress = Callable[[str], None]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def checked(provider: str, rows: list[Offer]) -> list[Offer]:
    """The rows to write: sane ones only, one per offer key (newest, then cheapest), no spot row that is
    not below its on-demand price (not a spot discount; the shipped catalog's rule too). Raises SourceError
    when nothing is left: an empty answer must never replace a provider's rows."""
    sane = [o for o in rows if o.provider == provider and o.gpu_count >= 1 and math.isfinite(o.price_hr)
            and o.price_hr > 0]
    if not sane:
        raise SourceError(f"no usable offer among {len(rows)} rows: keeping the previous rows")
    unique = newest_per_key(sorted(sane, key=lambda o: o.price_hr))
    on_demand: dict[tuple[str, str], float] = {}
    for o in unique:
        if o.market is Market.ON_DEMAND:
            place = (o.instance_type, o.region)
            on_demand[place] = min(o.price_hr, on_demand.get(place, math.inf))
    return [o for o in unique
            if o.market is not Market.SPOT or o.price_hr < on_demand.get((o.instance_type, o.region), math.inf)]


@dataclass
class _Fetch:
    """One provider's fetch, run in a thread: its rows and notes, or why it failed."""

    provider: str
    rows: list[Offer] | None = None
    notes: tuple[str, ...] = ()
    error: str | None = None
    seconds: float = 0.0


def _fetch(fetch: _Fetch, settings: RefreshSettings, now: datetime, progress: Progress) -> None:
    import httpx

    started = time.monotonic()
    rows: list[Offer] = []
    notes: list[str] = []
    try:
        with httpx.Client(timeout=settings.http_timeout_s, follow_redirects=True,
                          headers={"User-Agent": "orch-catalog-refresh"}) as client:
            ctx = RefreshContext(settings, client, now)
            for step in PLANS[fetch.provider]:
                progress(f"{fetch.provider}: {step.name}…")
                try:
                    result = step.run(rows, ctx)
                except SourceSkipped as skip:
                    notes.append(f"skipped {skip}")
                    continue
                rows, notes = result.offers, [*notes, result.note]
        fetch.rows = checked(fetch.provider, rows)
        fetch.notes = tuple(notes)
    except SourceError as exc:
        fetch.error = str(exc)
    except Exception as exc:  # a source's bug must not take the others' refresh down
        fetch.error = f"{type(exc).__name__}: {exc}"
    finally:
        fetch.seconds = time.monotonic() - started


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One writer at a time (the daemon's scheduled refresh and a manual one)."""
    import fcntl

    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".refresh.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _previous(directory: Path, provider: str) -> list[Offer]:
    try:
        return read_offers(user_catalog_file(provider, directory))
    except (OSError, CatalogFileError):
        return []


def _record_state(directory: Path, reports: Sequence[ProviderReport], now: datetime) -> None:
    path = directory / STATE_FILE
    try:
        state = json.loads(path.read_text())
        if not isinstance(state, dict):
            state = {}
    except (OSError, ValueError):
        state = {}
    for r in reports:
        entry = dict(state.get(r.provider) or {})
        entry.update({"last_attempt": now.isoformat(), "outcome": r.outcome.value, "error": r.error,
                      "notes": list(r.notes)})
        if r.outcome is Outcome.REFRESHED:
            entry.update({"last_success": now.isoformat(), "rows": r.rows})
        state[r.provider] = entry
    write_atomic(path, (json.dumps(state, indent=2, sort_keys=True) + "\n").encode())


def _write(directory: Path, fetch: _Fetch, started: datetime) -> ProviderReport:
    """The provider's rows, atomically, and what moved into the history, stamped with the refresh's start to
    the microsecond (two refreshes within one second are two points of the trend)."""
    assert fetch.rows is not None
    previous = _previous(directory, fetch.provider)
    write_atomic(user_catalog_file(fetch.provider, directory), render(fetch.rows))
    lines = history.changes(previous, fetch.rows, started)
    history.append(directory, lines)
    captured = [o.captured_at for o in fetch.rows if o.captured_at is not None]
    return ProviderReport(fetch.provider, Outcome.REFRESHED, rows=len(fetch.rows), previous_rows=len(previous),
                          changed=len(lines), notes=fetch.notes, captured_at=min(captured) if captured else None,
                          seconds=fetch.seconds)


def refresh(providers: Sequence[str], settings: RefreshSettings, *, directory: Path | None = None,
            clock: Callable[[], datetime] = _utcnow, progress: Progress = lambda _msg: None) -> RefreshReport:
    """Refresh ``providers`` (default: all six) into ``directory`` (default: the user catalog). Never raises
    for a source's failure: the report says which provider failed and why."""
    directory = directory or user_catalog_dir()
    names = [p for p in REFRESH_PROVIDERS if p in providers] if providers else list(REFRESH_PROVIDERS)
    started = clock().astimezone(UTC)
    now = started.replace(microsecond=0)
    fetches = [_Fetch(p) for p in names]
    threads = [threading.Thread(target=_fetch, args=(f, settings, now, progress), name=f"refresh-{f.provider}",
                                daemon=True) for f in fetches]
    for t in threads:
        t.start()
    deadline = time.monotonic() + settings.provider_timeout_s
    late: set[str] = set()
    for fetch, t in zip(fetches, threads, strict=True):
        t.join(max(deadline - time.monotonic(), 0.0))
        if t.is_alive():
            # The thread is abandoned (a daemon thread): whatever it returns later is never written.
            late.add(fetch.provider)
    reports: list[ProviderReport] = []
    with _locked(directory):
        for fetch in fetches:
            if fetch.provider in late or fetch.rows is None:
                error = f"timed out after {settings.provider_timeout_s:g} s" if fetch.provider in late else (
                    fetch.error or "no answer")
                progress(f"{fetch.provider}: FAILED: {error} (previous rows kept)")
                reports.append(ProviderReport(fetch.provider, Outcome.FAILED, previous_rows=len(
                    _previous(directory, fetch.provider)), notes=fetch.notes, error=error, seconds=fetch.seconds))
                continue
            report = _write(directory, fetch, started)
            progress(f"{fetch.provider}: {report.rows} rows ({report.changed} changed)")
            reports.append(report)
        _record_state(directory, reports, now)
    if directory == user_catalog_dir() and any(r.outcome is Outcome.REFRESHED for r in reports):
        # The quote's prebuilt index of the new catalog (a quote would otherwise build it on its first call).
        rebuild_index()
    return RefreshReport(str(directory), tuple(reports))
