"""The idle step: a machine whose GPUs all stayed under the job's threshold for its whole window is
stopped (keeping its disk, where the provider can stop) or terminated, with the rest of its gang; the job
is STOPPED. Utilization comes from the agents' reports (the tick's facts); the verdict is
``orchestrator.engine.idle_rule.idle_verdict``.

A stop is written before the cloud call (TERMINATE_REQUESTED with ``EndCause.IDLE_STOPPED``: a
``idle-stop-requested`` event) and after it (TERMINATED). A process killed between finds the attempt
TERMINATE_REQUESTED for a stop: the teardown step asks the stop again (``finish_stop``) until the cloud lists
the machine stopped, then writes what the killed process did not; never a terminate (the disk is kept), never
an attempt RUNNING on a stopped machine."""

from __future__ import annotations

from datetime import datetime, timedelta

from orchestrator.engine import gang
from orchestrator.engine.config import EngineDeps
from orchestrator.engine.crashpoints import crashpoint
from orchestrator.engine.ending import end_attempt
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import Observed, TickFacts
from orchestrator.engine.idle_rule import IdleAction, IdleVerdict, UtilSample, idle_verdict
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.engine.tick import TickLog
from providers.base import Capability, InstanceState
from providers.errors import ProviderError


class IdleStep:
    def __init__(self) -> None:
        self._samples: dict[int, list[UtilSample]] = {}     # per attempt, the window's utilization

    def run(self, deps: EngineDeps, facts: TickFacts, log: TickLog) -> None:
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
        try:
            provider.stop(inst.instance_id)
        except ProviderError as exc:
            log.report.errors.append(f"stop {inst.instance_id}: {exc} (asked again next tick)")
            return
        crashpoint("after-idle-stop-call")      # stopped in the cloud; not yet written
        deps.store.set_attempt_state(attempt.id, AttemptState.TERMINATED, now, reason="idle: stopped",
                                     cause=EndCause.IDLE_STOPPED)
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


def finish_stop(deps: EngineDeps, seen: Observed, now: datetime, log: TickLog) -> None:
    """An idle stop whose process died (or whose stop call failed) after TERMINATE_REQUESTED: ask the stop again
    while the machine runs; once the cloud lists it stopped, write the end, the job STOPPED and the event."""
    attempt, inst = seen.attempt, seen.instance
    if inst is None or inst.state.is_gone:
        return                                  # the sync confirms it gone (TERMINATED)
    log.ended.add(attempt.id)
    if inst.state is not InstanceState.STOPPED:
        try:
            deps.providers[attempt.offer.provider].stop(inst.instance_id)
        except ProviderError as exc:
            log.report.errors.append(f"stop {inst.instance_id}: {exc} (asked again next tick)")
        return
    deps.store.set_attempt_state(attempt.id, AttemptState.TERMINATED, now, reason="idle: stopped",
                                 cause=EndCause.IDLE_STOPPED)
    gang.end_others(deps, seen.job, attempt, f"idle: gang node {attempt.node_rank} idle", now, log)
    deps.store.set_job_status(seen.job.id, JobStatus.STOPPED, now)
    deps.store.event(EventKind.IDLE_SHUTDOWN, f"stop {inst.provider} {inst.instance_id}: stopped (finished after a "
                     "restart or a failed stop call)", now, job_id=seen.job.id)
