"""Operators' requests from the web console (orchestrator/store/requests.py): "relaunch now".

Each tick reads the open relaunch requests of the jobs this engine handles and honours them: the job's live
machines end now (``EndCause.RELAUNCH_REQUESTED``, terminated through ``ending``), the job is PENDING with a
relaunch counted, and the launch step gets a ``LaunchOrder`` that launches it again from its last committed
checkpoint, through the same budget gate as any launch. Only then are the requests taken
(``take_relaunch_requests``): a process killed in between leaves them open, and the next tick finds the
machines already ended and only orders the launch (a killed process never loses a request, nor ends a
replacement twice). A request for a job no longer active (the teardown overtook it) is taken and dropped
with an event.
"""

from __future__ import annotations

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ending import end_attempt
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import TickFacts
from orchestrator.engine.launch import LaunchOrder
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.engine.tick import TickLog
from orchestrator.engine.values import RelaunchRequest
from orchestrator.words import plural


def run(deps: EngineDeps, facts: TickFacts, log: TickLog) -> list[LaunchOrder]:
    if not deps.config.launches_allowed:
        return []       # ``orch down`` ticks: leave the requests for an engine that may launch
    # The active jobs and those being torn down: a request the teardown overtook is dropped, not left open.
    mine = set(facts.jobs) | {j.id for j in deps.store.jobs_to_tear_down()}
    requests = deps.store.relaunch_requests(sorted(mine))
    if not requests:
        return []
    orders = [order for r in requests if (order := _honour(deps, facts, log, r)) is not None]
    deps.store.take_relaunch_requests(facts.now, sorted({r.job_id for r in requests}))
    return orders


def _honour(deps: EngineDeps, facts: TickFacts, log: TickLog, request: RelaunchRequest) -> LaunchOrder | None:
    job = facts.jobs.get(request.job_id)
    if job is None or not job.desired_active:
        deps.store.event(EventKind.RELAUNCH_DROPPED,
                         f"job {request.job_name}: relaunch request dropped (no longer active)", facts.now,
                         job_id=request.job_id, data={"request_id": request.id})
        return None
    ended = [a for a in deps.store.live_attempts() if a.job_id == job.id and a.id not in log.ended
             and a.state is not AttemptState.TERMINATE_REQUESTED]
    for attempt in ended:
        end_attempt(deps, attempt, AttemptState.TERMINATED, EndCause.RELAUNCH_REQUESTED,
                    f"relaunch requested by the {request.requested_by}", facts.now, log)
    deps.store.set_job_status(job.id, JobStatus.PENDING, facts.now)
    deps.store.event(EventKind.RELAUNCH_NOW, f"job {job.name}: relaunching now as the {request.requested_by} asked "
                     f"({plural(len(ended), 'machine')} ended)", facts.now, job_id=job.id,
                     data={"request_id": request.id, "ended": [a.launch_id for a in ended]})
    return LaunchOrder(job.id, relaunch=True)
