"""Operators' requests from the web console (orchestrator/store/requests.py): "relaunch now".

Each tick takes the open relaunch requests of the jobs this engine handles, once (``take_relaunch_requests``
marks them taken in the same transaction, so no tick or daemon takes one twice), and honours them: the job's
live machines end (``EndCause.RELAUNCH_REQUESTED``; their machines are terminated now), and the launch step
gets a ``LaunchOrder`` for the job, which launches it again from its last committed checkpoint, through the
same budget gate as any launch. It is not counted as a recovery relaunch (``max_relaunches`` is about
preemptions). A request for a job no longer active (torn down since) is dropped with an event.
"""

from __future__ import annotations

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ending import end_attempt
from orchestrator.engine.facts import TickFacts
from orchestrator.engine.launch import LaunchOrder
from orchestrator.engine.ports import AttemptState, EndCause, JobStatus
from orchestrator.engine.tick import TickLog


def run(deps: EngineDeps, facts: TickFacts, log: TickLog) -> list[LaunchOrder]:
    if not deps.config.launches_allowed:
        return []       # ``orch down`` ticks: leave the requests for an engine that may launch
    # The active jobs and those being torn down: a request the teardown overtook is dropped, not left open.
    mine = set(facts.jobs) | {j.id for j in deps.store.jobs_to_tear_down()}
    requests = deps.store.take_relaunch_requests(facts.now, sorted(mine))
    if not requests:
        return []
    live = deps.store.live_attempts()
    orders: list[LaunchOrder] = []
    for request in requests:
        job = facts.jobs.get(request.job_id)
        if job is None or not job.desired_active:
            deps.store.event("relaunch-dropped", f"job {request.job_name}: relaunch request dropped (no longer "
                             "active)", facts.now, job_id=request.job_id)
            continue
        ended = [a for a in live if a.job_id == job.id and a.id not in log.ended
                 and a.state is not AttemptState.TERMINATE_REQUESTED]
        for attempt in ended:
            end_attempt(deps, attempt, AttemptState.TERMINATED, EndCause.RELAUNCH_REQUESTED,
                        f"relaunch requested by the {request.requested_by}", facts.now, log)
        deps.store.set_job_status(job.id, JobStatus.PENDING, facts.now)
        deps.store.event("relaunch-now", f"job {job.name}: relaunching now as the {request.requested_by} asked "
                         f"({len(ended)} machine(s) ended)", facts.now, job_id=job.id,
                         data={"request_id": request.id, "ended": [a.launch_id for a in ended]})
        orders.append(LaunchOrder(job.id))
    return orders
