"""Between ticks: what could make the next tick due now rather than at its interval.

Two agent reports change what a tick does at once, and waiting up to a whole interval for them is the time a
relaunch loses: a spot machine's agent hearing a preemption notice (the recovery step drains it and launches
the replacement in the same tick), and a noticed machine committing its notice checkpoint (the start step then
starts the replacement that waited for it). After each tick ``WakeWatch`` keeps the few attempts where either
can happen (spot machines running or starting whose agent had no notice; draining machines holding a successor), with
their machines as the tick saw them; ``due`` reads only those agents, through the engine's own monitor, and
says why a tick is due, or None. The daemon calls it on a short interval and runs the tick at once when it
answers (orchestrator/daemon/loop.py). It decides and writes nothing: the tick reads everything again.

Event-driven where the monitor can wait (``await_report``, the SSH monitor: one exec that waits ON THE NODE for
the agent's status to say it): each watched agent gets a waiter thread that blocks until its notice or commit
lands, then signals at once (``on_wake``, and ``wait`` returns) instead of at the next poll. The poll (``due``)
stays the fallback for monitors that cannot wait, for waiters over ``max_waiters`` and for a waiter that failed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from orchestrator.engine.facts import Draining, TickFacts
from orchestrator.engine.hooks import AgentReport, Monitor
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState
from providers.base import Instance, Market

_HOLDING = (AttemptState.LAUNCHED, AttemptState.BOOTSTRAPPING, AttemptState.RUNNING)
_LAUNCHED = "launched: its start is next"

log = logging.getLogger("orch.engine.wake")


class WatchFor(StrEnum):
    """What a watched agent's next report may say that makes a tick due (its value is the word the monitor's
    waiter on the node is given, and the start of ``due``'s reason)."""

    NOTICE = "notice"   # a running spot attempt: a notice that ends it
    COMMIT = "commit"   # a draining machine a replacement waits for: the job stopped, its upload done


@dataclass(frozen=True, slots=True)
class Watched:
    """One agent whose next report may make a tick due: ``NOTICE`` (a running spot attempt: a notice would
    be due) or ``COMMIT`` (a draining machine a replacement waits for: its commit would be due)."""

    job: JobRecord
    attempt: AttemptRecord
    instance: Instance
    why: WatchFor


def watch_list(facts: TickFacts) -> tuple[Watched, ...]:
    """The agents worth reading before the next tick, from what this tick saw."""
    out: list[Watched] = []
    for seen in facts.observed:
        a = seen.attempt
        # A machine the start step may have started this tick is watched too: its notice is as urgent.
        if (a.state in _HOLDING and a.offer.market is Market.SPOT and seen.machine_running
                and seen.instance is not None and seen.job.desired_active
                and (seen.agent is None or seen.agent.notice is None)):
            out.append(Watched(seen.job, a, seen.instance, WatchFor.NOTICE))
    waiting = {s.attempt.job_id for s in facts.observed
               if s.attempt.state in (AttemptState.LAUNCHED, AttemptState.BOOTSTRAPPING)}
    for d in facts.draining:
        job = facts.jobs.get(d.attempt.job_id)
        if job is not None and d.instance is not None and d.holds_successor and job.id in waiting:
            out.append(Watched(job, d.attempt, d.instance, WatchFor.COMMIT))
    return tuple(out)


def _fires(w: Watched, report: AgentReport | None) -> bool:
    if report is None:
        return False
    if w.why is WatchFor.NOTICE:
        return report.notice is not None
    # The start step's own rule (Draining.holds_successor) on the fresh report.
    return not Draining(attempt=w.attempt, instance=w.instance, agent=report).holds_successor


class WakeWatch:
    """The tick hands over its watch list (``after_tick``); ``due`` reads those agents, and waiters (where the
    monitor has ``await_report(job, attempt, instance, why, timeout_s) -> bool``) block on them between ticks.
    Thread-safe: the daemon reads from its scheduler's pool while a tick may be running; a read during a tick
    is skipped (the tick reads every agent itself), and a waiter that fires during one is kept for after it.

    ``on_wake(why)``: called from a waiter's thread when it fires between ticks (the daemon moves its tick to
    now). ``wait(timeout)``/``take()``: the reason a tick is due now, once (a waiter's, or a launching tick's)."""

    def __init__(self, monitor: Monitor, *, wait_s: float = 30.0, max_waiters: int = 64) -> None:
        self.monitor = monitor
        self.wait_s = wait_s
        self.max_waiters = max_waiters
        self.on_wake: Callable[[str], None] | None = None
        self._watched: tuple[Watched, ...] = ()
        self._why: str | None = None
        self._fired = threading.Event()
        self._waiters: dict[tuple[int, WatchFor], threading.Thread] = {}
        self._lock = threading.Lock()
        self.ticking = threading.Lock()

    def after_tick(self, watched: tuple[Watched, ...], *, again: bool = False) -> None:
        """The list a tick leaves; ``again``: the tick launched a machine, so a tick is due at once (the start
        step of the next tick starts it, or watches the predecessor it waits for). Arms a waiter per watched
        agent that has none."""
        with self._lock:
            self._watched = watched
            if self._why == _LAUNCHED:      # an earlier tick's launch: this tick was the one it asked for
                self._why = None
                self._fired.clear()
        if again:
            self._signal(_LAUNCHED, call=False)     # the caller (a tick) is still running: ``take`` answers it
        wait = getattr(self.monitor, "await_report", None)
        if wait is not None:
            for w in watched:
                self._arm(w, wait)

    @property
    def watched(self) -> tuple[Watched, ...]:
        with self._lock:
            return self._watched

    def take(self) -> str | None:
        """Why a tick is due now, once (a waiter fired, or the last tick launched), without waiting."""
        with self._lock:
            why, self._why = self._why, None
            self._fired.clear()
            return why

    def wait(self, timeout: float) -> str | None:
        """Block until a waiter fires or a launching tick left a tick due (then why, once), at most ``timeout``."""
        self._fired.wait(timeout)
        return self.take()

    def due(self) -> str | None:
        """Why a tick is due now ("launched: ...", "notice: <job>" or "commit: <job>"), or None. Reads once each
        watched agent that no live waiter covers; stops at the first that fires. A monitor error counts as
        nothing heard (the tick will say)."""
        if not self.ticking.acquire(blocking=False):
            return None             # a tick is running: it reads every agent itself
        try:
            if (why := self.take()) is not None:
                return why
            with self._lock:
                waited = set(self._waiters)     # a live waiter signals itself the moment it hears it
            for w in self.watched:
                if (w.attempt.id, w.why) in waited:
                    continue
                try:
                    report = self.monitor.read(w.job, w.attempt, w.instance)
                except Exception:  # a channel hiccup between ticks is the tick's to report
                    continue
                if _fires(w, report):
                    with self._lock:  # once: the tick that handles it sets a new list
                        self._watched = ()
                    return f"{w.why.value}: {w.job.name}"
            return None
        finally:
            self.ticking.release()

    def _signal(self, why: str, *, call: bool = True) -> None:
        with self._lock:
            self._why = self._why or why
            self._fired.set()
            callback = self.on_wake
        # During a tick the reason waits for it (``take`` after the tick): moving a tick that runs would be lost.
        if call and callback is not None and not self.ticking.locked():
            try:
                callback(why)
            except Exception:  # a scheduler shutting down: the reason stays for ``take``/``due``
                log.warning("wake callback failed", exc_info=True)

    def _arm(self, w: Watched, wait: Callable[..., bool]) -> None:
        key = (w.attempt.id, w.why)
        with self._lock:
            if key in self._waiters or len(self._waiters) >= self.max_waiters:
                return
            thread = threading.Thread(target=self._wait_on, args=(w, key, wait), daemon=True,
                                      name=f"orch-wake-{w.why.value}-{w.attempt.id}")
            self._waiters[key] = thread
        thread.start()

    def _still_watched(self, key: tuple[int, WatchFor]) -> bool:
        with self._lock:
            return any((w.attempt.id, w.why) == key for w in self._watched)

    def _wait_on(self, w: Watched, key: tuple[int, WatchFor], wait: Callable[..., bool]) -> None:
        """One waiter: block on the agent (``wait_s`` at a time) while it is watched; signal once when it fires.
        An error ends it (the poll covers that agent; the next tick arms a new waiter)."""
        try:
            while self._still_watched(key):
                try:
                    fired = wait(w.job, w.attempt, w.instance, w.why, self.wait_s)
                except Exception:
                    log.debug("wake waiter %s failed", key, exc_info=True)
                    return
                if fired:
                    if self._still_watched(key):
                        self._signal(f"{w.why.value}: {w.job.name}")
                    return
        finally:
            with self._lock:
                self._waiters.pop(key, None)
