"""``orch daemon`` pauses garbage collection for its first tick and settles its heap once after it, whether
the tick succeeded or not (orchestrator/daemon/loop.py)."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from orchestrator.daemon import loop as daemon
from orchestrator.daemon.loop import DaemonSettings, run_daemon
from orchestrator.daemon.observability import DaemonMetrics
from orchestrator.engine.tick import TickReport


class _Engine:
    """Fails its first tick, then succeeds; stops the daemon after its fourth. Notes whether the collector
    ran during each tick."""

    def __init__(self, stop: threading.Event) -> None:
        self.ticks = 0
        self.stop = stop
        self.collecting: list[bool] = []

    def tick(self) -> TickReport:
        self.ticks += 1
        self.collecting.append(gc.isenabled())
        if self.ticks >= 4:
            self.stop.set()
        if self.ticks == 1:
            raise RuntimeError("a provider is down")
        return TickReport()


def test_collection_pauses_for_the_first_tick_and_the_heap_is_settled_once_after_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    engine = _Engine(stop)
    settled_at: list[int] = []

    def settle() -> None:
        settled_at.append(engine.ticks)
        gc.enable()

    monkeypatch.setattr(daemon, "settle_heap", settle)
    try:
        run_daemon(lambda: engine, DaemonSettings(reconcile_interval_s=0.01, settle_heap=True), DaemonMetrics(), stop)  # type: ignore[arg-type,return-value]
    finally:
        gc.enable()
    assert engine.ticks >= 4 and settled_at == [1]            # after the first tick, though it failed
    assert engine.collecting[:4] == [False, True, True, True]


def test_a_daemon_run_inside_another_program_leaves_its_collector_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    engine = _Engine(stop)
    monkeypatch.setattr(daemon, "settle_heap", lambda: pytest.fail("settled a heap not its own"))
    run_daemon(lambda: engine, DaemonSettings(reconcile_interval_s=0.01), DaemonMetrics(), stop)  # type: ignore[arg-type,return-value]
    assert engine.ticks >= 4 and all(engine.collecting)


def test_settling_collects_the_garbage_and_freezes_what_lives() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    garbage = weakref.ref(Cycle())                  # freed only by a collection
    frozen_before = gc.get_freeze_count()
    try:
        daemon.pause_collection()
        assert not gc.isenabled()
        daemon.settle_heap()
        assert garbage() is None                    # collected, not frozen with the rest
        assert gc.get_freeze_count() > frozen_before and gc.isenabled()
    finally:
        gc.unfreeze()
        gc.enable()
