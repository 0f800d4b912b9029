"""Between ticks, the engine's wake watch says when a tick is due now: a spot agent heard a notice, or the
noticed machine a replacement waits for committed its checkpoint (orchestrator/engine/wake.py); the daemon then
moves its reconcile tick to now (orchestrator/daemon/loop.py ``wake_if_due``). Driven by the agents' reports and the
engine's fake clock: no wall-clock window."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from orchestrator.daemon.loop import DaemonSettings, run_daemon, wake_if_due
from orchestrator.daemon.observability import DaemonMetrics
from orchestrator.engine.facts import Observed, TickFacts
from orchestrator.engine.hooks import AgentReport
from orchestrator.engine.states import AttemptState
from orchestrator.engine.tick import TickReport
from orchestrator.engine.wake import WakeWatch, WatchFor, watch_list
from providers.base import Market
from tests.test_engine import live, notice, settle, spec, world  # noqa: F401

NOTICE = notice()


def test_a_notice_then_the_commit_each_make_one_tick_due(world) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    clock, store, aws, gcp, monitor, rec = world
    job = store.add_job(spec(), clock())
    settle(rec, clock)
    [old] = live(aws, gcp)
    [attempt] = [a for a in store.attempts_for_job(job.id) if a.state is AttemptState.RUNNING]
    assert attempt.offer.market is Market.SPOT
    monitor.reports[old.instance_id] = AgentReport(gpu_util_pct=(90.0,))
    assert rec.wake.due() is None                                  # running, nothing heard: no tick due
    # The agent hears a notice between ticks: the next read says a tick is due, once.
    monitor.reports[old.instance_id] = AgentReport(notice=NOTICE, checkpoints=(("s3://b/step-5", 5),))
    assert rec.wake.due() == "notice: train"
    assert rec.wake.due() is None
    report = rec.tick()                                            # drains A, launches B in the same pass
    assert (report.preempted, report.relaunched) == (1, 1)
    [new] = [i for i in live(aws, gcp) if i.instance_id != old.instance_id]
    # B was launched: the tick that starts it (or sees what it waits for) is due at once.
    assert rec.wake.due() == "launched: its start is next"
    rec.tick()
    assert new.instance_id not in [iid for iid, *_ in rec.hooks.bootstrapper.started]   # B waits for A
    # Watched: A for its commit, and B (spot, up) for a notice of its own.
    assert {(w.why, w.attempt.instance_id) for w in rec.wake.watched} == {(WatchFor.COMMIT, old.instance_id),
                                                                          (WatchFor.NOTICE, new.instance_id)}
    assert rec.wake.due() is None                                  # A still uploading
    monitor.reports[old.instance_id] = AgentReport(notice=NOTICE, exit_code=-15, pending_uploads=1)
    assert rec.wake.due() is None                                  # stopped, upload not done
    monitor.reports[old.instance_id] = AgentReport(notice=NOTICE, exit_code=-15,
                                                   checkpoints=(("s3://b/step-5", 5), ("s3://b/step-9", 9)))
    assert rec.wake.due() == "commit: train"
    rec.tick()
    assert new.instance_id in [iid for iid, *_ in rec.hooks.bootstrapper.started]
    assert store.last_checkpoint(job.id) == "s3://b/step-9"


def test_no_read_while_a_tick_runs_and_on_demand_machines_are_not_watched(world) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    clock, store, aws, gcp, monitor, rec = world
    store.add_job(spec(), clock())
    settle(rec, clock)
    [watched] = rec.wake.watched
    assert watched.why is WatchFor.NOTICE
    [old] = live(aws, gcp)
    monitor.reports[old.instance_id] = AgentReport(notice=NOTICE)
    with rec.wake.ticking:                                         # a tick holds it: it reads every agent itself
        assert rec.wake.due() is None
    assert rec.wake.due() == "notice: train"                      # once it is over
    # The same machine bought on demand would not be watched (no notice comes to it).
    on_demand = replace(watched.attempt, offer=replace(watched.attempt.offer, market=Market.ON_DEMAND))
    facts = TickFacts(now=clock(), listed={}, unlistable=frozenset(), jobs={}, draining=(), held_jobs=frozenset(),
                      observed=(Observed(job=watched.job, attempt=on_demand, before=AttemptState.RUNNING,
                                         instance=watched.instance, agent=None),))
    assert watch_list(facts) == ()


class _Scheduler:
    def __init__(self) -> None:
        self.moved: list[tuple[str, dict[str, Any]]] = []

    def modify_job(self, job_id: str, jobstore: str | None = None, **changes: Any) -> None:
        self.moved.append((job_id, changes))


def test_the_daemon_moves_its_tick_to_now_only_when_one_is_due(world) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    clock, store, aws, gcp, monitor, rec = world
    store.add_job(spec(), clock())
    settle(rec, clock)
    [old] = live(aws, gcp)
    scheduler = _Scheduler()
    assert wake_if_due(rec, scheduler) is None and scheduler.moved == []
    monitor.reports[old.instance_id] = AgentReport(notice=NOTICE)
    assert wake_if_due(rec, scheduler) == "notice: train"
    assert [(job_id, list(changes)) for job_id, changes in scheduler.moved] == [("reconcile", ["next_run_time"])]


class _Wake:
    """A wake watch that answers once, after the daemon's first tick."""

    def __init__(self, engine: _Ticking) -> None:
        self.engine = engine
        self.answered = False

    def due(self) -> str | None:
        if self.engine.ticks >= 1 and not self.answered:
            self.answered = True
            return "notice: train"
        return None


class _Ticking:
    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.ticks = 0
        self.wake = _Wake(self)

    def tick(self) -> TickReport:
        self.ticks += 1
        if self.ticks >= 2:
            self.stop.set()
        return TickReport()


def test_the_running_daemon_ticks_again_when_the_watch_answers_not_an_interval_later() -> None:
    stop = threading.Event()
    engine = _Ticking(stop)
    # An hour between ticks: only the watch's answer can bring the second tick (the wait is a failure guard).
    guard = threading.Timer(120, stop.set)
    guard.start()
    try:
        run_daemon(lambda: engine, DaemonSettings(reconcile_interval_s=3600, wake_interval_s=0.05),  # type: ignore[arg-type,return-value]
                   DaemonMetrics(), stop)
    finally:
        guard.cancel()
    assert engine.wake.answered and engine.ticks == 2


class _AwaitingMonitor:
    """A monitor that can wait (``await_report``): each call blocks until the test releases that attempt's
    ``why``; ``read`` counts the polls it is asked for (a covered agent must not be polled)."""

    def __init__(self) -> None:
        self.released: dict[WatchFor, threading.Event] = {w: threading.Event() for w in WatchFor}
        self.armed = threading.Event()
        self.reads = 0

    def read(self, job: Any, attempt: Any, instance: Any) -> AgentReport | None:
        self.reads += 1
        return None

    def await_report(self, job: Any, attempt: Any, instance: Any, why: WatchFor, timeout_s: float) -> bool:
        self.armed.set()
        return self.released[why].wait()


def test_a_waiter_signals_the_moment_its_agent_hears_a_notice_and_the_poll_leaves_it_alone(world) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    clock, store, *_, rec = world
    store.add_job(spec(), clock())
    settle(rec, clock)
    watched = rec.wake.watched
    assert [w.why for w in watched] == [WatchFor.NOTICE]
    monitor = _AwaitingMonitor()
    wake = WakeWatch(monitor)  # type: ignore[arg-type]
    heard: list[str] = []
    called = threading.Event()
    wake.on_wake = lambda why: (heard.append(why), called.set())  # type: ignore[func-returns-value]
    try:
        wake.after_tick(watched)
        assert monitor.armed.wait(60)                       # a failure guard: the waiter is on the node now
        assert wake.due() is None and monitor.reads == 0    # the waiter covers it: no poll of that agent
        assert wake.take() is None
        monitor.released[WatchFor.NOTICE].set()                    # the notice lands on the node
        assert called.wait(60) and heard == ["notice: train"]
        assert wake.wait(60) == "notice: train"             # once
        assert wake.take() is None
    finally:
        for e in monitor.released.values():
            e.set()


def test_a_waiter_that_fires_during_a_tick_is_kept_for_after_it(world) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    clock, store, *_, rec = world
    store.add_job(spec(), clock())
    settle(rec, clock)
    monitor = _AwaitingMonitor()
    wake = WakeWatch(monitor)  # type: ignore[arg-type]
    heard: list[str] = []
    wake.on_wake = heard.append
    try:
        with wake.ticking:                                  # a tick runs: moving it now would be lost
            wake.after_tick(rec.wake.watched)
            assert monitor.armed.wait(60)
            monitor.released[WatchFor.NOTICE].set()
            assert wake.wait(60) == "notice: train"         # the daemon's run takes it right after its tick
        assert heard == []
    finally:
        for e in monitor.released.values():
            e.set()


class _LaunchingWake:
    """A wake watch whose first tick launched a machine: ``take`` answers once, after it."""

    def __init__(self, engine: _FollowedUp) -> None:
        self.engine = engine
        self.taken = 0

    def take(self) -> str | None:
        if self.engine.ticks == 1:
            self.taken += 1
            return "launched: its start is next"
        return None

    def due(self) -> str | None:
        return None


class _FollowedUp:
    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.ticks = 0
        self.wake = _LaunchingWake(self)

    def tick(self) -> TickReport:
        self.ticks += 1
        if self.ticks >= 2:
            self.stop.set()
        return TickReport()


def test_a_tick_that_launched_is_followed_at_once_in_the_same_run() -> None:
    stop = threading.Event()
    engine = _FollowedUp(stop)
    # An hour between ticks and no wake poll: only the follow-up can bring the second tick (failure guard).
    guard = threading.Timer(120, stop.set)
    guard.start()
    try:
        run_daemon(lambda: engine, DaemonSettings(reconcile_interval_s=3600, wake_interval_s=0),  # type: ignore[arg-type,return-value]
                   DaemonMetrics(), stop)
    finally:
        guard.cancel()
    assert engine.ticks == 2 and engine.wake.taken == 1
