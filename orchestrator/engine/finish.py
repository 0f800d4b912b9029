"""The finish step: a job whose process exited. Exit 0 succeeds (a gang once every node exited 0);
non-zero fails the job and ends the rest of its gang. A job its agent stopped after a preemption notice
(non-zero exit with a notice) is a preemption, not a failure: the recovery step takes it. A failure is typed
(orchestrator/engine/failure.py): one ``node-failed`` event carries its cause, the node's words and the fix."""

from __future__ import annotations

from orchestrator.engine import gang
from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ending import end_attempt
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import TickFacts
from orchestrator.engine.failure import of_exit
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.engine.tick import TickLog


def run(deps: EngineDeps, facts: TickFacts, log: TickLog) -> None:
    changed = facts.changed
    for seen in facts.observed:
        if changed is not None and seen.attempt.id not in changed:
            continue        # unchanged since last tick: no report
        agent, attempt = seen.agent, seen.attempt
        if agent is None or agent.exit_code is None or attempt.id in log.ended:
            continue
        if agent.exit_code != 0 and agent.notice is not None:
            continue
        job, ok = seen.job, agent.exit_code == 0
        reason = f"job exited {agent.exit_code}"
        if not ok:
            failure = of_exit(agent.exit_code, agent.last_words)
            reason = f"{failure.cause.value}: {reason}" + (f": {agent.last_words}" if agent.last_words else "")
            deps.store.event(EventKind.NODE_FAILED, f"node {attempt.node_rank} {failure.headline()} (exit "
                             f"{agent.exit_code}); fix: {failure.cause.fix}", facts.now, job_id=job.id,
                             data={**failure.to_data(), "exit_code": agent.exit_code,
                                   "launch_id": attempt.launch_id})
        end_attempt(deps, attempt, AttemptState.SUCCEEDED if ok else AttemptState.FAILED,
                    EndCause.SUCCEEDED if ok else EndCause.FAILED, reason, facts.now, log)
        if not ok:
            gang.end_others(deps, job, attempt, f"gang: node {attempt.node_rank} failed", facts.now, log)
            deps.store.set_job_status(job.id, JobStatus.FAILED, facts.now)
        elif not gang.others_live(deps, job, attempt, log):
            deps.store.set_job_status(job.id, JobStatus.SUCCEEDED, facts.now)
