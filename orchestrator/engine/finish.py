"""The finish step: a job whose process exited. Exit 0 succeeds (a gang once every node exited 0);
non-zero fails the job and ends the rest of its gang. A job its agent stopped after a preemption notice
(non-zero exit with a notice) is a preemption, not a failure: the recovery step takes it."""

from __future__ import annotations

from orchestrator.engine import gang
from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ending import end_attempt
from orchestrator.engine.facts import TickFacts
from orchestrator.engine.ports import AttemptState, EndCause, JobStatus
from orchestrator.engine.tick import TickLog


def run(deps: EngineDeps, facts: TickFacts, log: TickLog) -> None:
    for seen in facts.observed:
        agent, attempt = seen.agent, seen.attempt
        if agent is None or agent.exit_code is None or attempt.id in log.ended:
            continue
        if agent.exit_code != 0 and agent.notice is not None:
            continue
        job, ok = seen.job, agent.exit_code == 0
        reason = f"job exited {agent.exit_code}"
        if not ok and agent.last_words:
            reason += f": {agent.last_words}"
        end_attempt(deps, attempt, AttemptState.SUCCEEDED if ok else AttemptState.FAILED,
                    EndCause.SUCCEEDED if ok else EndCause.FAILED, reason, facts.now, log)
        if not ok:
            gang.end_others(deps, job, attempt, f"gang: node {attempt.node_rank} failed", facts.now, log)
            deps.store.set_job_status(job.id, JobStatus.FAILED, facts.now)
        elif not gang.others_live(deps, job, attempt, log):
            deps.store.set_job_status(job.id, JobStatus.SUCCEEDED, facts.now)
