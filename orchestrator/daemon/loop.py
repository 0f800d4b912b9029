"""``orch daemon``: APScheduler jobs in a thread pool, the reconcile tick also callable once (``orch tick``).

Jobs: reconcile (list clouds, adopt, launch, recover, idle, collect orphans; a tick that leaves the next due at
once, having launched a machine, is followed at once), the wake watch (its waiters move the reconcile tick to now
the moment a watched agent's notice or commit lands; every ``wake_interval_s``, default 1 s, it also reads the
agents no waiter covers: orchestrator/engine/wake.py) and catalog
refresh (every ``catalog.refresh_every``, default 6 h: ``orch catalog refresh`` in the daemon, after which the
engine prices from the refreshed catalog). Reconcile ticks never overlap (max_instances=1, coalesce), and
every one is logged as a JSON line with what it changed. The one-daemon rule on SQLite is the store's
(``orchestrator.store.leases.daemon_lock``); on PostgreSQL several daemons share jobs through row leases.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from orchestrator.daemon.observability import DaemonMetrics
from orchestrator.engine.reconciler import Reconciler
from orchestrator.engine.tick import TickReport

log = logging.getLogger("orch.daemon")


@dataclass
class DaemonSettings:
    reconcile_interval_s: float = 15.0
    refresh_interval_s: float = 6 * 3600.0          # catalog.refresh_every
    workers: int = 4
    #: Pause garbage collection for the first tick and settle the heap after it (``pause_collection``,
    #: ``settle_heap``): what ``orch daemon``, a process of its own, does. Off for a daemon run inside another
    #: program (tests), whose heap is not the daemon's to freeze.
    settle_heap: bool = False
    #: How often, between ticks, the agents that could make a tick due now are read (a spot notice, the commit
    #: a replacement waits for: orchestrator/engine/wake.py); 0 turns it off.
    wake_interval_s: float = 1.0


def run_tick(reconciler: Reconciler, metrics: DaemonMetrics | None = None) -> TickReport:
    """One reconcile tick, logged; errors are logged and counted, never kill the daemon."""
    from orchestrator.store.fleet import LeaseLostError

    try:
        report = reconciler.tick()
    except LeaseLostError as exc:
        # Paused or partitioned past its lease: it acted on nothing since; the next tick claims anew.
        log.warning("reconcile tick stopped: lease lost", extra={"fields": {"why": str(exc)}})
        if metrics:
            metrics.ticks.labels("reconcile", "lease-lost").inc()
        raise
    except Exception:
        log.exception("reconcile tick failed")
        if metrics:
            metrics.ticks.labels("reconcile", "error").inc()
        raise
    if metrics:
        metrics.ticks.labels("reconcile", "ok").inc()
    log.info("reconcile tick", extra={"fields": {
        "launched": report.launched, "adopted": report.adopted, "preempted": report.preempted,
        "relaunched": report.relaunched, "terminated": report.terminated,
        "orphans_terminated": report.orphans_terminated, "idle_stopped": report.idle_stopped,
        "errors": report.errors[:5]}})
    return report


def pause_collection() -> None:
    """Before the daemon's first tick: no garbage collection while it loads (``settle_heap`` resumes it).

    The first tick after a start loads what lives as long as the process (each held job's parsed manifest and
    spec, its attempts' records, the listing: ~250k objects at 10k jobs). Collecting while they pile up walks
    the growing heap again and again: ~1 s of a ~2.7 s first tick at 10k jobs."""
    gc.disable()


def settle_heap() -> None:
    """Once, after the daemon's first tick: collect, take what it loaded out of the collector's full passes,
    and resume collecting.

    Each later tick makes objects that die at the next one (its facts, ~50k at 10k jobs). They survive long
    enough to count towards a full collection, which then walked the whole heap almost every tick (~0.1-0.15 s
    of CPU at 10k jobs). ``gc.freeze`` leaves the loaded objects out of those passes; collecting first
    freezes no garbage with them (~0.15 s, once)."""
    gc.collect()
    gc.freeze()
    gc.enable()


class Rescheduler(Protocol):
    def modify_job(self, job_id: str, jobstore: str | None = None, **changes: Any) -> Any: ...


#: Ticks a reconcile run may add right after its own when each leaves a tick due at once (a launch, a waiter
#: that fired during it); beyond them the wake's poll brings the next (a launch storm cannot hold the run).
FOLLOW_UPS = 4


def wake_if_due(reconciler: Reconciler, scheduler: Rescheduler) -> str | None:
    """Ask the engine's wake watch; when it answers, move the reconcile tick to now (returns why)."""
    why = reconciler.wake.due()
    if why is not None:
        _move_now(scheduler, why)
    return why


def _move_now(scheduler: Rescheduler, why: str) -> None:
    scheduler.modify_job("reconcile", next_run_time=datetime.now())
    log.info("reconcile tick due now", extra={"fields": {"why": why}})


def _take(wake: Any) -> str | None:
    take = getattr(wake, "take", None)
    return take() if take is not None else None


def run_daemon(make_reconciler: Callable[[], Reconciler], settings: DaemonSettings, metrics: DaemonMetrics,
               stop: threading.Event, catalog_refresh: Callable[[], Any] | None = None) -> None:
    """Run the scheduler until ``stop`` is set. The reconciler is built once (it keeps in-memory
    windows: GPU samples, orphan first-seen times) and its ticks never overlap. ``catalog_refresh``
    (``orch catalog refresh``'s work) runs at start and every ``refresh_interval_s``."""
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.background import BackgroundScheduler

    reconciler = make_reconciler()
    scheduler = BackgroundScheduler(executors={"default": ThreadPoolExecutor(settings.workers)},
                                    job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30})

    settled: list[bool] = []
    wake = getattr(reconciler, "wake", None)

    def reconcile_job() -> None:
        try:
            for _ in range(1 + FOLLOW_UPS):
                run_tick(reconciler, metrics)
                # Due again at once (it launched a machine, or a waiter fired while it ran): the next tick now,
                # in this run (moving a tick that is still running would be lost), not at the wake's next poll.
                why = _take(wake)
                if why is None or stop.is_set():
                    break
                log.info("reconcile tick due now", extra={"fields": {"why": why}})
        except Exception:  # logged in run_tick; the next tick tries again
            pass
        finally:
            if settings.settle_heap and not settled:  # after the first tick, good or not: never left paused
                settle_heap()
                settled.append(True)

    if settings.settle_heap:
        pause_collection()
    scheduler.add_job(reconcile_job, "interval", seconds=settings.reconcile_interval_s, id="reconcile",
                      next_run_time=datetime.now())
    if wake is not None and hasattr(wake, "on_wake"):
        # A waiter heard a notice or a commit between ticks: the tick now, not at the next poll.
        wake.on_wake = lambda why: _move_now(scheduler, why)
    if settings.wake_interval_s > 0 and getattr(reconciler, "wake", None) is not None:
        scheduler.add_job(wake_if_due, "interval", args=(reconciler, scheduler), seconds=settings.wake_interval_s,
                          id="wake-watch")
    if catalog_refresh is not None:
        from orchestrator.daemon.catalog_schedule import catalog_due_at, refresh_catalog

        scheduler.add_job(refresh_catalog, "interval", args=(catalog_refresh, reconciler),
                          seconds=settings.refresh_interval_s, id="catalog-refresh",
                          next_run_time=catalog_due_at(settings.refresh_interval_s, datetime.now(UTC)))
    scheduler.start()
    log.info("daemon started", extra={"fields": {"interval_s": settings.reconcile_interval_s}})
    try:
        stop.wait()
    finally:
        scheduler.shutdown(wait=True)       # waits for a tick in progress
        log.info("scheduler stopped")
