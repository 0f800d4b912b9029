"""The teardown step: jobs no longer wanted (``orch down``, pruned) lose their machines; terminations in
flight are asked again until the cloud confirms them (the sync then marks them TERMINATED)."""

from __future__ import annotations

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ending import request_termination, terminate
from orchestrator.engine.facts import TickFacts
from orchestrator.engine.idle import finish_stop
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.engine.tick import TickLog


def run(deps: EngineDeps, facts: TickFacts, log: TickLog) -> None:
    _ask_again(deps, facts, log)
    for job in deps.store.jobs_to_tear_down():
        for attempt in deps.store.attempts_for_job(job.id):
            if (not attempt.state.is_live or attempt.state is AttemptState.TERMINATE_REQUESTED
                    or attempt.offer.provider not in deps.providers):
                continue
            request_termination(deps, attempt, EndCause.DOWN, "down", facts.now, log)
            log.report.terminated += 1
        if job.status is not JobStatus.STOPPED:
            deps.store.set_job_status(job.id, JobStatus.STOPPED, facts.now)


def _ask_again(deps: EngineDeps, facts: TickFacts, log: TickLog) -> None:
    """TERMINATE_REQUESTED attempts whose machine the cloud still lists: terminate is idempotent. An idle stop
    in flight (``EndCause.IDLE_STOPPED``) is a stop, never a terminate (orchestrator/engine/idle.py)."""
    for seen in facts.observed:
        if (seen.attempt.state is AttemptState.TERMINATE_REQUESTED and seen.attempt.end_cause is EndCause.IDLE_STOPPED
                and seen.attempt.id not in log.ended):
            finish_stop(deps, seen, facts.now, log)
        elif (seen.attempt.state is AttemptState.TERMINATE_REQUESTED and seen.instance is not None
                and not seen.instance.state.is_gone):
            terminate(deps.providers[seen.attempt.offer.provider], seen.instance.instance_id, log)
