"""Ending the rest of a multi-node gang: the one way a step that ends a node ends its other nodes.

Apart from orchestrator/engine/gang.py (which launches gangs through the budget gate) so the budget step, which
ends gangs at a cap, can use it without an import cycle; ``gang`` re-exports both functions.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ending import request_termination
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.engine.tick import TickLog


def others_live(deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, log: TickLog) -> list[AttemptRecord]:
    """The other live attempts of ``attempt``'s gang (fresh from the store), less those ended this tick. The gang
    is the attempts of its generation, never the job's manifest as it reads now: a job re-applied with fewer
    nodes (``resources.nodes: 2`` -> ``1``) still runs the gang it launched, and none of its nodes may be left
    running when one ends."""
    return [a for a in deps.store.attempts_for_job(job.id)
            if a.generation == attempt.generation and a.id != attempt.id and a.state.is_live
            and a.id not in log.ended]


def end_others(deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, reason: str, now: datetime,
               log: TickLog, *, drain_until: datetime | None = None) -> None:
    """End every other live node of ``attempt``'s gang (``EndCause.GANG``). With ``drain_until`` their
    machines keep running until then, as for a noticed node (the sweep ends them); else they end now."""
    for other in others_live(deps, job, attempt, log):
        log.ended.add(other.id)
        if other.instance_id is None:
            # Never launched, or the cloud may still be creating it: the sweep ends what shows up.
            deps.store.set_attempt_state(other.id, AttemptState.TERMINATED, now, reason=reason, cause=EndCause.GANG)
        elif drain_until is not None:
            deps.store.set_attempt_state(other.id, AttemptState.TERMINATED, now, reason=reason, cause=EndCause.GANG,
                                         drain_until=drain_until)
        else:
            request_termination(deps, other, EndCause.GANG, reason, now, log)
