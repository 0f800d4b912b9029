"""The daemon's scheduled catalog refresh: when it is due, that it runs, and that the engine then prices from
the refreshed catalog."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from orchestrator.daemon.catalog_schedule import catalog_due_at, refresh_catalog
from orchestrator.daemon.loop import DaemonSettings, run_daemon
from orchestrator.daemon.observability import DaemonMetrics
from providers.catalog import load_catalog
from providers.catalog.fileformat import render, write_atomic
from providers.catalog.loader import user_catalog_dir, user_catalog_file
from providers.catalog.refresh import Outcome, ProviderReport, RefreshReport

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_the_first_refresh_is_due_one_period_after_the_last_success() -> None:
    assert catalog_due_at(6 * 3600, NOW) == NOW                                   # never refreshed: now
    state = user_catalog_dir() / "refresh.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"aws": {"last_success": (NOW - timedelta(hours=1)).isoformat()},
                                 "gcp": {"last_success": (NOW - timedelta(hours=2)).isoformat()},
                                 "vastai": {"last_attempt": NOW.isoformat()}}))
    assert catalog_due_at(6 * 3600, NOW) == NOW + timedelta(hours=4)              # the oldest provider decides
    assert catalog_due_at(3600, NOW) == NOW                                       # overdue: now
    state.write_text("{garbage")
    assert catalog_due_at(6 * 3600, NOW) == NOW


class _Engine:
    """Stands in for the Reconciler: the daemon only ticks it and swaps its ``catalog`` (``swapped`` is set)."""

    def __init__(self) -> None:
        self._catalog: list[Any] = list(load_catalog().offers)
        self.swapped = threading.Event()

    @property
    def catalog(self) -> list[Any]:
        return self._catalog

    @catalog.setter
    def catalog(self, offers: list[Any]) -> None:
        self._catalog = offers
        self.swapped.set()

    def tick(self) -> Any:
        raise RuntimeError("not under test")


def _refresh_vast(price: float) -> RefreshReport:
    shipped = next(o for o in load_catalog().offers if o.provider == "vastai")
    fresh = replace(shipped, price_hr=price, captured_at=NOW, price_as_of=NOW.date(), price_as_of_approximate=False)
    write_atomic(user_catalog_file("vastai"), render([fresh]))
    return RefreshReport(str(user_catalog_dir()), (ProviderReport("vastai", Outcome.REFRESHED, rows=1),))


def test_after_a_refresh_the_engine_prices_from_the_refreshed_rows() -> None:
    load_catalog.cache_clear()
    engine = _Engine()
    refresh_catalog(lambda: _refresh_vast(0.123), engine)  # type: ignore[arg-type]
    vast = [o for o in engine.catalog if o.provider == "vastai"]
    assert [o.price_hr for o in vast] == [0.123]
    assert len([o for o in engine.catalog if o.provider == "aws"]) > 100          # the rest is untouched

    def broken() -> RefreshReport:
        raise OSError("disk full")

    before = list(engine.catalog)
    refresh_catalog(broken, engine)  # type: ignore[arg-type]                    # logged, engine unchanged
    assert engine.catalog == before


def test_the_daemon_runs_the_refresh_on_its_schedule(tmp_path: Path) -> None:
    load_catalog.cache_clear()
    engine = _Engine()
    ran = threading.Event()
    stop = threading.Event()

    def refresh() -> RefreshReport:
        report = _refresh_vast(0.321)
        ran.set()
        return report

    def stop_when_swapped() -> None:
        engine.swapped.wait(timeout=60)
        stop.set()

    watcher = threading.Thread(target=stop_when_swapped)
    watcher.start()
    run_daemon(lambda: engine, DaemonSettings(reconcile_interval_s=3600, refresh_interval_s=6 * 3600),  # type: ignore[arg-type,return-value]
               DaemonMetrics(), stop, catalog_refresh=refresh)
    watcher.join()
    assert ran.is_set() and engine.swapped.is_set()
    assert [o.price_hr for o in engine.catalog if o.provider == "vastai"] == [0.321]
