"""The daemon's scheduled catalog refresh: when it is due, and what it does with the engine afterwards."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.engine.reconciler import Reconciler

log = logging.getLogger("orch.daemon")


def catalog_due_at(interval_s: float, now: datetime) -> datetime:
    """When the first scheduled refresh is due: one period after the last successful one (now if it is overdue
    or there never was one), so restarting the daemon neither skips nor repeats a refresh."""
    import json

    from providers.catalog.loader import user_catalog_dir
    from providers.catalog.refresh.runner import STATE_FILE

    try:
        state = json.loads((user_catalog_dir() / STATE_FILE).read_text())
        last = min(datetime.fromisoformat(v["last_success"]) for v in state.values() if v.get("last_success"))
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return now
    return max(now, last + timedelta(seconds=interval_s))


def refresh_catalog(refresh: Callable[[], Any], reconciler: Reconciler) -> None:
    """One scheduled catalog refresh: log each provider's outcome, then hand the engine the refreshed catalog.

    A failed provider keeps its previous rows (the refresh guarantees it); an error here is logged and the
    next period tries again. The engine keeps its catalog in memory, so it is swapped for the new one.
    """
    from providers.catalog import load_catalog

    try:
        report = refresh()
    except Exception:
        log.exception("catalog refresh failed")
        return
    for p in report.providers:
        log.info("catalog refresh", extra={"fields": {"provider": p.provider, "outcome": p.outcome.value,
                                                      "rows": p.rows, "changed": p.changed, "error": p.error}})
    load_catalog.cache_clear()
    if hasattr(reconciler, "catalog"):
        reconciler.catalog = list(load_catalog().offers)
