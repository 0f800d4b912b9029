"""The liveness step: nothing bills without a live job. A node that cannot show it runs the job is ended.

Three deadlines (``EngineConfig.deadlines``, a job's manifest may set its own), each ending the attempt
(TERMINATE_REQUESTED, terminate where the cloud still lists it, FAILED) with a typed cause:

* ``boot_timeout``: the node's agent has not reported once since the launch (``created_at``): a machine that
  never booted, an image that never started the agent, an SSH host never reached. ``EndCause.BOOT_TIMEOUT``.
* ``heartbeat_timeout``: the agent reported before and has been silent this long while the cloud lists the
  machine running (a dead SSH host, a hung node, an agent killed). ``EndCause.SILENT``.
* ``unreachable_grace``: the cloud itself lists the machine UNREACHABLE (Vast ``unknown``/``offline``, Lambda
  ``unhealthy``, GCE ``REPAIRING``, Azure ``unknown``: it may come back) and has for this long.
  ``EndCause.UNREACHABLE``. A holding attempt whose machine the cloud lists STOPPED counts the same way:
  orch's own stops (idle) write TERMINATE_REQUESTED with their cause before the cloud call, so a machine
  stopped under a holding attempt was stopped outside orch (by hand, by the cloud); past the same grace the
  node is lost (``EndCause.LOST``, a ``stopped-outside`` event) and recovered, never left holding forever.

Agent deadlines only where a channel exists: a machine whose job has nowhere to report (no checkpoint store, no
``daemon.state_store``, no SSH key: ``Monitor.listens`` says so) gets no heartbeat deadline, as with the
``NoMonitor``: silence there says nothing, and only the cloud's state counts. Its boot deadline holds all the same,
read from orch's own record instead of the agent's: an attempt still not started (LAUNCHED or BOOTSTRAPPING: the
cloud never listed it running, or the job was never started on it) ``boot_timeout`` after its launch is ended
(``EndCause.BOOT_TIMEOUT``), since a paid machine that never boots must not bill for ever. A started attempt's
machine rebooting (listed booting again) is not judged by this deadline.

"Heard" means the Monitor (``orchestrator.engine.hooks``) returned a report this tick whose agent heartbeat
moved on since the last one (a report carrying no heartbeat counts whenever it is read). The agent's clock is
never compared with the engine's: only whether its heartbeat moved, timed by the engine clock.

Every deadline counts from the store's marks (``created_at``; ``AttemptRecord.heard_at`` with the agent's
heartbeat then, ``heard_beat``; ``unreachable_since``), so a restarted daemon (or ``orch tick`` from cron)
ends a silent node at the same time as one that never stopped. ``heard_at`` is written at most every quarter
of the heartbeat timeout; between writes the exact time is kept in memory. A process reading an agent for the
first time compares its heartbeat with the stored one: the same value is silence since ``heard_at``; a value
that moved on was heard when it was written, as far as the agent's own clock tells (``heard_at`` plus the
heartbeat's advance, never later than now: a difference of the agent's own readings, so its offset from the
engine's clock cancels). So a daemon back after a long outage ends no node whose agent kept reporting.

What follows is the recovery step's, as after a preemption: this step returns the tick's facts with the
ended attempts in them (``Observed.lost``), so the recovery decides from its last committed checkpoint, and
keeps the ended node's zone (else region) out for the job's cool-down (``recovery_facts.cooled_places``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from orchestrator.engine.config import Deadlines, EngineDeps
from orchestrator.engine.crashpoints import crashpoint
from orchestrator.engine.ending import end_attempt
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import HOLDING_STATES, Observed, TickFacts
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.engine.tick import TickLog
from providers.base import InstanceState

_EVENTS = {EndCause.BOOT_TIMEOUT: EventKind.BOOT_TIMEOUT, EndCause.SILENT: EventKind.NODE_SILENT,
           EndCause.UNREACHABLE: EventKind.NODE_UNREACHABLE, EndCause.LOST: EventKind.STOPPED_OUTSIDE}
#: Listed states under which a node cannot run its job: counted from ``unreachable_since`` against the grace.
_OFF = frozenset({InstanceState.UNREACHABLE, InstanceState.STOPPED})
#: Attempts whose job was never started on their machine: the boot deadline holds for them with or without a channel.
_UNSTARTED = frozenset({AttemptState.LAUNCHED, AttemptState.BOOTSTRAPPING})


def deadlines_for(deps: EngineDeps, job: JobRecord) -> Deadlines:
    """The daemon's deadlines with the job's manifest's own in their place."""
    base, spec = deps.config.deadlines, job.spec
    return Deadlines(boot_timeout=spec.boot_timeout or base.boot_timeout,
                     heartbeat_timeout=spec.heartbeat_timeout or base.heartbeat_timeout,
                     unreachable_grace=spec.unreachable_grace or base.unreachable_grace)


@dataclass(frozen=True, slots=True)
class Verdict:
    cause: EndCause
    why: str


class LivenessStep:
    def __init__(self) -> None:
        #: Per attempt, the agent's last heartbeat seen by this process (None: a report without one).
        self._beats: dict[int, datetime | None] = {}
        #: Per attempt, when (engine clock) it was last heard; exact, where the store's mark may lag.
        self._heard: dict[int, datetime] = {}
        #: Per attempt judged, the first time a deadline can pass if nothing about it changes (None: never):
        #: an attempt the sync handed on unchanged (``TickFacts.changed``) is judged again only from then on.
        self._due: dict[int, datetime | None] = {}

    def run(self, deps: EngineDeps, facts: TickFacts, log: TickLog) -> TickFacts:
        """End the nodes past a deadline; return the facts with them ended (for the recovery step)."""
        ended: dict[int, AttemptRecord] = {}
        changed, now, dues = facts.changed, facts.now, self._due
        for seen in facts.observed:
            a = seen.attempt
            if changed is not None and a.id not in changed and a.id in dues:
                due = dues[a.id]
                if due is None or now < due:
                    continue    # unchanged, and no deadline can have passed since it was judged
            if (a.state not in HOLDING_STATES or a.id in log.ended or not seen.job.desired_active
                    or seen.instance is None or seen.instance.state.is_gone):
                continue
            verdict = self._judge(deps, seen, facts.now)
            if verdict is not None:
                ended[a.id] = self._end(deps, seen, verdict, facts.now, log)
        # Forget ended attempts; those of a cloud that did not answer are not in the facts but still live.
        live = {o.attempt.id for o in facts.observed} if not facts.unlistable else set(self._beats) | set(self._heard)
        self._beats = {k: v for k, v in self._beats.items() if k in live and k not in ended}
        self._heard = {k: v for k, v in self._heard.items() if k in live and k not in ended}
        self._due = {k: v for k, v in self._due.items() if k in live and k not in ended}
        return _with_ended(facts, ended) if ended else facts

    def _judge(self, deps: EngineDeps, seen: Observed, now: datetime) -> Verdict | None:
        a, inst = seen.attempt, seen.instance
        assert inst is not None
        limits = deadlines_for(deps, seen.job)
        listening = deps.hooks.monitor.listens(seen.job, a, inst)
        heard, mark, beat = self._hear(seen, now, limits) if listening else (a.heard_at, a.heard_at, a.heard_beat)
        since = (a.unreachable_since or now) if inst.state in _OFF else None
        if (mark, since, beat) != (a.heard_at, a.unreachable_since, a.heard_beat):
            deps.store.note_liveness(a.id, heard_at=mark, unreachable_since=since, heard_beat=beat)
        self._due[a.id] = _due(a, inst.state, listening, heard, since, limits)
        past = since is not None and now - since >= limits.unreachable_grace
        if past and inst.state is InstanceState.STOPPED:
            return Verdict(EndCause.LOST, f"{inst.provider} lists it stopped since {_at(since)} with no stop of "
                           f"orch's (grace {_span(limits.unreachable_grace)})")
        if past:
            return Verdict(EndCause.UNREACHABLE, f"{inst.provider} lists it {inst.raw_state or 'unreachable'} "
                           f"since {_at(since)} (grace {_span(limits.unreachable_grace)})")
        if not listening:
            launched = a.created_at or now
            if a.state in _UNSTARTED and now - launched >= limits.boot_timeout:
                return Verdict(EndCause.BOOT_TIMEOUT, f"not started {_span(now - launched)} after launch ("
                               f"{inst.provider} lists it {inst.raw_state or inst.state.value}; no report channel; "
                               f"boot timeout {_span(limits.boot_timeout)})")
            return None
        if heard is None:
            launched = a.created_at or now
            if now - launched >= limits.boot_timeout:
                return Verdict(EndCause.BOOT_TIMEOUT, f"no report from its agent {_span(now - launched)} after "
                               f"launch (boot timeout {_span(limits.boot_timeout)})")
            return None
        if inst.state is InstanceState.RUNNING and now - heard >= limits.heartbeat_timeout:
            return Verdict(EndCause.SILENT, f"its agent silent since {heard.isoformat(timespec='seconds')} "
                           f"(heartbeat timeout {_span(limits.heartbeat_timeout)})")
        return None

    def _hear(self, seen: Observed, now: datetime,
              limits: Deadlines) -> tuple[datetime | None, datetime | None, datetime | None]:
        """When the attempt was last heard, counting this tick's report, and the marks the store should hold
        (``heard_at`` and the heartbeat then: moved on only when never written or a quarter timeout old)."""
        a, report = seen.attempt, seen.agent
        last = max((t for t in (a.heard_at, self._heard.get(a.id)) if t is not None), default=None)
        if report is None:
            return last, a.heard_at, a.heard_beat
        beat = report.heartbeat_at
        at = now
        if a.id in self._beats:
            moved = beat is None or self._beats[a.id] != beat
        else:                   # the first read by this process: against the stored heartbeat (see the docstring)
            moved = beat is None or a.heard_at is None or a.heard_beat is None or beat != a.heard_beat
            if moved and beat is not None and a.heard_at is not None and a.heard_beat is not None \
                    and beat > a.heard_beat:
                at = min(now, a.heard_at + (beat - a.heard_beat))
        self._beats[a.id] = beat
        if not moved:
            return last, a.heard_at, a.heard_beat
        at = max(at, last) if last is not None else at
        self._heard[a.id] = at
        due = a.heard_at is None or at - a.heard_at >= limits.heartbeat_timeout / 4
        return (at, at, beat) if due else (at, a.heard_at, a.heard_beat)

    def _end(self, deps: EngineDeps, seen: Observed, verdict: Verdict, now: datetime, log: TickLog) -> AttemptRecord:
        a = seen.attempt
        where = f"{a.offer.provider} {a.instance_id or a.launch_id}"
        kind = _EVENTS[verdict.cause]
        crashpoint(f"before-{kind.value}")       # decided, nothing written yet
        deps.store.event(kind, f"{where}: {verdict.why}; ending it", now, job_id=a.job_id,
                         data={"zone": a.offer.zone, "region": a.offer.region, "launch_id": a.launch_id})
        end_attempt(deps, a, AttemptState.FAILED, verdict.cause, verdict.why, now, log)
        crashpoint(f"after-{kind.value}")        # ended and written; the recovery has not decided yet
        log.report.terminated += 1
        return replace(a, state=AttemptState.FAILED, ended_at=now, reason=verdict.why, end_cause=verdict.cause)


def _due(a: AttemptRecord, state: InstanceState, listening: bool, heard: datetime | None, since: datetime | None,
         limits: Deadlines) -> datetime | None:
    """When a deadline of ``_judge`` can first pass for the attempt if nothing about it changes (None: never)."""
    times = [since + limits.unreachable_grace] if since is not None else []
    if not listening and a.state in _UNSTARTED and a.created_at is not None:
        times.append(a.created_at + limits.boot_timeout)
    elif listening and heard is None:
        if a.created_at is not None:    # without one the boot deadline counts from each judgement: never passes
            times.append(a.created_at + limits.boot_timeout)
    elif listening and state is InstanceState.RUNNING:
        times.append(heard + limits.heartbeat_timeout)
    return min(times, default=None)


def _with_ended(facts: TickFacts, ended: dict[int, AttemptRecord]) -> TickFacts:
    observed = tuple(replace(o, attempt=ended[o.attempt.id]) if o.attempt.id in ended else o
                     for o in facts.observed)
    jobs = {a.job_id for a in ended.values()}
    still = {o.attempt.job_id for o in observed if o.attempt.state.is_live}
    changed = None if facts.changed is None else facts.changed | ended.keys()     # ended: new to the later steps
    return replace(facts, observed=observed, held_jobs=frozenset((facts.held_jobs - jobs) | (still & jobs)),
                   changed=changed)


def _at(t: datetime | None) -> str:
    return t.isoformat(timespec="seconds") if t is not None else "now"


def _span(d: timedelta) -> str:
    s = int(d.total_seconds())
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
