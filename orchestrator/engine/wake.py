"""Between ticks: what could make the next tick due now rather than at its interval.

Two agent reports change what a tick does at once, and waiting up to a whole interval for them is the time a
relaunch loses: a spot machine's agent hearing a preemption notice (the recovery step drains it and launches
the replacement in the same tick), and a noticed machine committing its notice checkpoint (the start step then
starts the replacement that waited for it). After each tick ``WakeWatch`` keeps the few attempts where either
can happen (spot machines running or starting whose agent had no notice; draining machines holding a successor), with
their machines as the tick saw them; ``due`` reads only those agents, through the engine's own monitor, and
says why a tick is due, or None. The daemon calls it on a short interval and runs the tick at once when it
answers (orchestrator/daemon/loop.py). It decides and writes nothing: the tick reads everything again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from orchestrator.engine.facts import Draining, TickFacts
from orchestrator.engine.hooks import AgentReport, Monitor
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState
from providers.base import Instance, Market

_HOLDING = (AttemptState.LAUNCHED, AttemptState.BOOTSTRAPPING, AttemptState.RUNNING)


@dataclass(frozen=True, slots=True)
class Watched:
    """One agent whose next report may make a tick due: ``notice`` (a running spot attempt: a notice would
    be due) or ``commit`` (a draining machine a replacement waits for: its commit would be due)."""

    job: JobRecord
    attempt: AttemptRecord
    instance: Instance
    why: str


def watch_list(facts: TickFacts) -> tuple[Watched, ...]:
    """The agents worth reading before the next tick, from what this tick saw."""
    out: list[Watched] = []
    for seen in facts.observed:
        a = seen.attempt
        # A machine the start step may have started this tick is watched too: its notice is as urgent.
        if (a.state in _HOLDING and a.offer.market is Market.SPOT and seen.machine_running
                and seen.instance is not None and seen.job.desired_active
                and (seen.agent is None or seen.agent.notice is None)):
            out.append(Watched(seen.job, a, seen.instance, "notice"))
    waiting = {s.attempt.job_id for s in facts.observed
               if s.attempt.state in (AttemptState.LAUNCHED, AttemptState.BOOTSTRAPPING)}
    for d in facts.draining:
        job = facts.jobs.get(d.attempt.job_id)
        if job is not None and d.instance is not None and d.holds_successor and job.id in waiting:
            out.append(Watched(job, d.attempt, d.instance, "commit"))
    return tuple(out)


def _fires(w: Watched, report: AgentReport | None) -> bool:
    if report is None:
        return False
    if w.why == "notice":
        return report.notice is not None
    # The start step's own rule (Draining.holds_successor) on the fresh report.
    return not Draining(attempt=w.attempt, instance=w.instance, agent=report).holds_successor


class WakeWatch:
    """The tick hands over its watch list (``after_tick``); ``due`` reads those agents. Thread-safe: the
    daemon reads from its scheduler's pool while a tick may be running; a read during a tick is skipped (the
    tick reads every agent itself)."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor
        self._watched: tuple[Watched, ...] = ()
        self._again = False
        self._lock = threading.Lock()
        self.ticking = threading.Lock()

    def after_tick(self, watched: tuple[Watched, ...], *, again: bool = False) -> None:
        """The list a tick leaves; ``again``: the tick launched a machine, so the next ``due`` answers at
        once (the start step of the next tick starts it, or watches the predecessor it waits for)."""
        with self._lock:
            self._watched = watched
            self._again = again

    @property
    def watched(self) -> tuple[Watched, ...]:
        with self._lock:
            return self._watched

    def due(self) -> str | None:
        """Why a tick is due now ("notice: <job>" or "commit: <job>"), or None. Reads each watched agent
        once; stops at the first that fires. A monitor error counts as nothing heard (the tick will say)."""
        if not self.ticking.acquire(blocking=False):
            return None             # a tick is running: it reads every agent itself
        try:
            with self._lock:
                if self._again:
                    self._again = False
                    return "launched: its start is next"
            for w in self.watched:
                try:
                    report = self.monitor.read(w.job, w.attempt, w.instance)
                except Exception:  # a channel hiccup between ticks is the tick's to report
                    continue
                if _fires(w, report):
                    with self._lock:  # once: the tick that handles it sets a new list
                        self._watched = ()
                    return f"{w.why}: {w.job.name}"
            return None
        finally:
            self.ticking.release()
