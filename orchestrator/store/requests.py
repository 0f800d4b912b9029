"""Operators' requests to the engine (the web console's two actions), as store writes.

Stop: the same write ``orch down`` makes (desired state DELETED), so the engine tears the job down on its
next tick. Relaunch now: a ``job_requests`` row the engine takes once with ``take_relaunch_requests`` and
honours (end the job's machines, launch again from the last committed checkpoint). Both leave an event.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlmodel import Session, col, select

from orchestrator.clock import utcnow
from orchestrator.engine.events import EventKind
from orchestrator.engine.states import DesiredState, RequestKind
from orchestrator.engine.values import RelaunchRequest
from orchestrator.store import repo
from orchestrator.store.models import Job, JobRequest


class RequestRefusedError(ValueError):
    """The request cannot apply to the job as it is (the message says why)."""


def _view(row: JobRequest, name: str) -> RelaunchRequest:
    assert row.id is not None
    return RelaunchRequest(row.id, row.job_id, name, row.requested_at, row.requested_by, row.taken_at)


def request_stop(tx: Session, name: str, *, by: str = "console", now: datetime | None = None) -> Job:
    """Mark the job for teardown (desired state DELETED: what ``orch down`` writes) and record who asked.

    Raises ``repo.NotFoundError`` for an unknown job. Stopping a job already marked is a no-op write."""
    now = now or utcnow()
    job = repo.require_job(tx, name)
    if job.desired_state != DesiredState.DELETED.value:
        repo.set_desired_state(tx, name, DesiredState.DELETED, now=now)
        repo.record_event(tx, EventKind.JOB_STOP_REQUESTED, f"job {name}: stop requested from the {by}", job_id=job.id,
                          data={"by": by}, ts=now)
    return job


def request_relaunch(tx: Session, name: str, *, by: str = "console", now: datetime | None = None) -> RelaunchRequest:
    """Ask the engine to relaunch the job now. One open request per job: asking again returns the open one.

    Raises ``repo.NotFoundError`` for an unknown job, ``RequestRefusedError`` for a job not applied
    (pruned or torn down): there is nothing the engine would launch."""
    now = now or utcnow()
    job = repo.require_job(tx, name)
    assert job.id is not None
    if job.desired_state != DesiredState.ACTIVE.value:
        raise RequestRefusedError(f"job {name} is {job.desired_state}: apply its manifest again to run it")
    open_row = tx.exec(select(JobRequest).where(JobRequest.job_id == job.id,
                                                JobRequest.kind == RequestKind.RELAUNCH.value,
                                                col(JobRequest.taken_at).is_(None))).first()
    if open_row is not None:
        return _view(open_row, name)
    row = JobRequest(job_id=job.id, kind=RequestKind.RELAUNCH.value, requested_at=now, requested_by=by)
    tx.add(row)
    tx.flush()
    repo.record_event(tx, EventKind.JOB_RELAUNCH_REQUESTED, f"job {name}: relaunch requested from the {by}",
                      job_id=job.id, data={"by": by, "request_id": row.id}, ts=now)
    return _view(row, name)


def open_relaunch_request(tx: Session, job_id: int) -> RelaunchRequest | None:
    """The job's relaunch request the engine has not taken yet, if any."""
    row = tx.exec(select(JobRequest, Job.name).join(Job, col(Job.id) == col(JobRequest.job_id))
                  .where(JobRequest.job_id == job_id, JobRequest.kind == RequestKind.RELAUNCH.value,
                         col(JobRequest.taken_at).is_(None))).first()
    return None if row is None else _view(row[0], row[1])


def open_relaunch_requests(tx: Session, job_ids: Sequence[int] | None = None) -> list[RelaunchRequest]:
    """The open relaunch requests of these jobs (None: of every job), oldest first, left open (the engine acts
    on them, then takes them: a crash in between leaves them open for the next tick, which finds the machines
    already ended)."""
    if job_ids is not None and not job_ids:
        return []
    # The open requests are few and a daemon's jobs many (10k ids would make a 10k-parameter IN every tick):
    # read the open ones and keep this daemon's here.
    wanted = None if job_ids is None else set(job_ids)
    query = (select(JobRequest, Job.name).join(Job, col(Job.id) == col(JobRequest.job_id))
             .where(JobRequest.kind == RequestKind.RELAUNCH.value, col(JobRequest.taken_at).is_(None))
             .order_by(col(JobRequest.requested_at), col(JobRequest.id)))
    return [_view(row, name) for row, name in tx.exec(query).all() if wanted is None or row.job_id in wanted]


def take_relaunch_requests(tx: Session, *, now: datetime | None = None,
                           job_ids: Sequence[int] | None = None) -> list[RelaunchRequest]:
    """The open relaunch requests (of ``job_ids`` only, when given: a daemon passes the jobs it leases),
    oldest first, each marked taken in this transaction so no tick or daemon takes it twice.

    On PostgreSQL the rows are locked ``FOR UPDATE SKIP LOCKED``: two daemons taking at once split them.
    The engine acts on what it takes in the same tick; a request for a job that is no longer active is
    dropped by the engine (taken, with an event), never left open."""
    now = now or utcnow()
    query = (select(JobRequest, Job.name).join(Job, col(Job.id) == col(JobRequest.job_id))
             .where(JobRequest.kind == RequestKind.RELAUNCH.value, col(JobRequest.taken_at).is_(None)))
    if job_ids is not None:
        if not job_ids:
            return []
        query = query.where(col(JobRequest.job_id).in_(list(job_ids)))
    query = query.order_by(col(JobRequest.requested_at), col(JobRequest.id))
    # SQLite ignores the lock clause: its database lock serialises writers.
    query = query.with_for_update(skip_locked=True, of=JobRequest)  # type: ignore[arg-type]
    taken: list[RelaunchRequest] = []
    for row, name in tx.exec(query).all():
        row.taken_at = now
        tx.add(row)
        taken.append(_view(row, name))
    tx.flush()
    return taken
