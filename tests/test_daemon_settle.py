"""``orch daemon`` settles its heap once, after its first tick that succeeded (orchestrator/daemon.py)."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from orchestrator import daemon
from orchestrator.daemon import DaemonSettings, run_daemon
from orchestrator.engine.tick import TickReport
from orchestrator.observability import DaemonMetrics


class _Engine:
    """Fails its first tick, then succeeds; stops the daemon after its fourth."""

    def __init__(self, stop: threading.Event) -> None:
        self.ticks = 0
        self.stop = stop

    def tick(self) -> TickReport:
        self.ticks += 1
        if self.ticks >= 4:
            self.stop.set()
        if self.ticks == 1:
            raise RuntimeError("a provider is down")
        return TickReport()


def test_the_heap_is_settled_once_after_the_first_good_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    engine = _Engine(stop)
    settled_at: list[int] = []
    monkeypatch.setattr(daemon, "settle_heap", lambda: settled_at.append(engine.ticks))
    run_daemon(lambda: engine, DaemonSettings(reconcile_interval_s=0.01), DaemonMetrics(), stop)  # type: ignore[arg-type,return-value]
    assert engine.ticks >= 4 and settled_at == [2]


def test_settling_collects_the_garbage_and_freezes_what_lives() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    garbage = weakref.ref(Cycle())                  # freed only by a collection
    frozen_before = gc.get_freeze_count()
    try:
        daemon.settle_heap()
        assert garbage() is None                    # collected, not frozen with the rest
        assert gc.get_freeze_count() > frozen_before
    finally:
        gc.unfreeze()
