"""The idle step: a machine whose GPUs all stayed under the job's threshold for its whole window is
stopped (keeping its disk, where the provider can stop) or terminated, with the rest of its gang; the job
is STOPPED. Utilization comes from the agents' reports (the tick's facts); the verdict is
``orchestrator.engine.idle_rule.idle_verdict``.

A stop is written before the cloud call (TERMINATE_REQUESTED with ``EndCause.IDLE_STOPPED``: a
``idle-stop-requested`` event) and after it (TERMINATED). A process killed between finds the attempt
TERMINATE_REQUESTED for a stop: the teardown step asks the stop again (``finish_stop``) until the cloud lists
the machine stopped, then writes what the killed process did not; never a terminate (the disk is kept), never
an attempt RUNNING on a stopped machine. But a stop the cloud refuses for good (``InvalidRequestError``: AWS cannot
stop a one-time spot instance) terminates the machine instead (``EndCause.IDLE_TERMINATED``): asked again, it would be
refused on every tick while the idle machine bills on."""

from __future__ import annotations

from datetime import datetime, timedelta

from orchestrator.engine import gang
from orchestrator.engine.config import EngineDeps
from orchestrator.engine.crashpoints import crashpoint
from orchestrator.engine.ending import end_attempt
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import Observed, TickFacts
from orchestrator.engine.idle_rule import IdleAction, IdleVerdict, UtilSample, idle_verdict
from orchestrator.engine.ports import AttemptRecord
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.engine.tick import TickLog
from providers.base import Capability, InstanceState
from providers.errors import InvalidRequestError, ProviderError


class IdleStep:
    def __init__(self) -> None:
        self._samples: dict[int, list[UtilSample]] = {}     # per attempt, the window's utilization
        #: Attempts whose stored utilization (an earlier process's) was read into ``_samples``: once each.
        self._seeded: set[int] = set()

    def run(self, deps: EngineDeps, facts: TickFacts, log: TickLog) -> None:
        self._seed(deps, facts)
        changed, samples = facts.changed, self._samples
        for seen in facts.observed:
            if changed is not None and seen.attempt.id not in changed and not samples.get(seen.attempt.id):
                continue    # unchanged, and no utilization to judge: not idle ("missing data is never idle")
            if seen.agent is not None and seen.agent.gpu_util_pct:
                self._sample(seen, facts.now)
            if (seen.attempt.state is not AttemptState.RUNNING or not seen.machine_running
                    or not seen.job.desired_active or seen.attempt.id in log.ended):
                continue
            verdict = idle_verdict(self._samples.get(seen.attempt.id, ()), seen.job.spec.idle, facts.now)
            if verdict.idle:
                _shut_down(deps, seen, verdict, facts.now, log)

    def _seed(self, deps: EngineDeps, facts: TickFacts) -> None:
        """The window so far of each attempt reporting utilization for the first time in this process, from the
        store (what an earlier process, or another daemon that held the job, recorded): a window holds across
        restarts, as the liveness deadlines do. One read per tick in which such attempts appear; none after."""
        new = [seen for seen in facts.observed if seen.agent is not None and seen.agent.gpu_util_pct
               and seen.attempt.id not in self._seeded]
        if not new:
            return
        since = facts.now - max(seen.job.spec.idle.window for seen in new) - timedelta(minutes=5)
        stored: dict[int, list[UtilSample]] = {}
        for r in deps.store.gpu_util_since([seen.attempt.id for seen in new], since):
            stored.setdefault(r.attempt_id, []).append(UtilSample(r.at, r.gpu_util_pct))
        for seen in new:
            self._seeded.add(seen.attempt.id)
            if seen.attempt.id in stored:
                self._samples[seen.attempt.id] = stored[seen.attempt.id] + self._samples.get(seen.attempt.id, [])
        live = {seen.attempt.id for seen in facts.observed}
        if not facts.unlistable:    # an attempt of a cloud that did not answer is still live: kept
            self._seeded &= live

    def samples(self, attempt_id: int) -> tuple[UtilSample, ...]:
        """The utilization the idle verdict sees for an attempt (its window, and five minutes more)."""
        return tuple(self._samples.get(attempt_id, ()))

    def _sample(self, seen: Observed, now: datetime) -> None:
        samples = self._samples.setdefault(seen.attempt.id, [])
        assert seen.agent is not None
        samples.append(UtilSample(now, seen.agent.gpu_util_pct))
        horizon = now - seen.job.spec.idle.window - timedelta(minutes=5)
        self._samples[seen.attempt.id] = [s for s in samples if s.at >= horizon]


def _shut_down(deps: EngineDeps, seen: Observed, verdict: IdleVerdict, now: datetime, log: TickLog) -> None:
    job, attempt, inst = seen.job, seen.attempt, seen.instance
    assert inst is not None
    action = job.spec.idle.action
    provider = deps.providers[attempt.offer.provider]
    if action is IdleAction.STOP and Capability.STOP in provider.capabilities:
        log.ended.add(attempt.id)
        deps.store.set_attempt_state(attempt.id, AttemptState.TERMINATE_REQUESTED, now,
                                     reason=f"idle: stop requested ({verdict.reason})", cause=EndCause.IDLE_STOPPED)
        deps.store.event(EventKind.IDLE_STOP_REQUESTED, f"stop {inst.provider} {inst.instance_id}: {verdict.reason}",
                         now, job_id=job.id)
        crashpoint("after-idle-stop-requested")
        done = _stop(deps, attempt, inst.instance_id, now, log)
        if done is None:
            return
        if done is EndCause.IDLE_STOPPED:
            crashpoint("after-idle-stop-call")      # stopped in the cloud; not yet written
            deps.store.set_attempt_state(attempt.id, AttemptState.TERMINATED, now, reason="idle: stopped",
                                         cause=EndCause.IDLE_STOPPED)
        else:
            action = IdleAction.TERMINATE
    else:
        end_attempt(deps, attempt, AttemptState.TERMINATED, EndCause.IDLE_TERMINATED, f"idle: {verdict.reason}",
                    now, log)
    gang.end_others(deps, job, attempt, f"idle: gang node {attempt.node_rank} idle", now, log)
    deps.store.set_job_status(job.id, JobStatus.STOPPED, now)
    deps.store.event(EventKind.IDLE_SHUTDOWN, f"{action.value} {inst.provider} {inst.instance_id}: {verdict.reason}",
                     now, job_id=job.id)
    log.report.idle_stopped += 1
    if deps.metrics:
        deps.metrics.idle_shutdowns.labels(action.value).inc()


def _stop(deps: EngineDeps, attempt: AttemptRecord, instance_id: str, now: datetime,
          log: TickLog) -> EndCause | None:
    """Ask the cloud to stop an idle machine. ``IDLE_STOPPED``: it accepted. ``IDLE_TERMINATED``: it refused the
    request for good (``InvalidRequestError``: a machine its cloud cannot stop, such as an AWS one-time spot
    instance), so the machine is terminated instead and the attempt ended (an idle machine must not bill on for
    want of a kept disk; asked again, the stop would be refused on every tick, ``orch down``'s too). None: it
    failed otherwise (a throttle, a 5xx, credentials to fix): the attempt stays TERMINATE_REQUESTED and the stop
    is asked again next tick."""
    try:
        deps.providers[attempt.offer.provider].stop(instance_id)
    except ProviderError as exc:
        if not isinstance(exc, InvalidRequestError):
            log.report.errors.append(f"stop {instance_id}: {exc} (asked again next tick)")
            return None
        log.report.errors.append(f"stop {instance_id}: {exc} (terminated instead)")
        end_attempt(deps, attempt, AttemptState.TERMINATED, EndCause.IDLE_TERMINATED,
                    f"idle: the cloud refused to stop it ({exc}): terminated", now, log)
        return EndCause.IDLE_TERMINATED
    return EndCause.IDLE_STOPPED


def finish_stop(deps: EngineDeps, seen: Observed, now: datetime, log: TickLog) -> None:
    """An idle stop whose process died (or whose stop call failed) after TERMINATE_REQUESTED: ask the stop again
    while the machine runs; once the cloud lists it stopped, write the end, the job STOPPED and the event."""
    attempt, inst = seen.attempt, seen.instance
    if inst is None or inst.state.is_gone:
        return                                  # the sync confirms it gone (TERMINATED)
    log.ended.add(attempt.id)
    if inst.state is not InstanceState.STOPPED:
        if _stop(deps, attempt, inst.instance_id, now, log) is not EndCause.IDLE_TERMINATED:
            return      # asked again next tick, or stopped: written once the cloud lists it stopped
        done = "terminate {}: the cloud refused to stop it (finished after a restart or a failed stop call)"
    else:
        deps.store.set_attempt_state(attempt.id, AttemptState.TERMINATED, now, reason="idle: stopped",
                                     cause=EndCause.IDLE_STOPPED)
        done = "stop {}: stopped (finished after a restart or a failed stop call)"
    gang.end_others(deps, seen.job, attempt, f"idle: gang node {attempt.node_rank} idle", now, log)
    deps.store.set_job_status(seen.job.id, JobStatus.STOPPED, now)
    deps.store.event(EventKind.IDLE_SHUTDOWN, done.format(f"{inst.provider} {inst.instance_id}"), now,
                     job_id=seen.job.id)
