"""What the commands show and check (orch status, down, apply's wait): jobs by name, their newest events and
failures, the machines that may still bill, the live attempts of some jobs, the daemons registered now."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func
from sqlmodel import Session, col, select

from orchestrator.engine.events import EventKind
from orchestrator.store.models import GONE_INSTANCE_STATE_VALUES, Attempt, DaemonRow, Event, InstanceRow, Job
from orchestrator.store.queries import LIVE_ATTEMPT_STATE_VALUES, live_launch_ids


def job_names(tx: Session) -> dict[int, str]:
    return {r.id: r.name for r in tx.exec(select(Job)) if r.id is not None}


def jobs_named(tx: Session, names: Sequence[str]) -> dict[int, str]:
    """Ids of the jobs with these names (unknown names are left out)."""
    return {r.id: r.name for r in tx.exec(select(Job).where(col(Job.name).in_(list(names)))) if r.id is not None}


def last_event(tx: Session, job_id: int) -> Event | None:
    return tx.exec(select(Event).where(Event.job_id == job_id).order_by(col(Event.id).desc()).limit(1)).first()


def last_failures(tx: Session, job_ids: Sequence[int], kinds: Sequence[EventKind]) -> dict[int, Event]:
    """Per job, its newest event of ``kinds`` (the failure events, whose data carries a typed cause)."""
    if not job_ids:
        return {}
    newest = (select(func.max(Event.id))
              .where(col(Event.job_id).in_(list(job_ids)), col(Event.kind).in_([k.value for k in kinds]))
              .group_by(col(Event.job_id)))
    return {e.job_id: e for e in tx.exec(select(Event).where(col(Event.id).in_(newest))) if e.job_id is not None}


def last_event_id(tx: Session) -> int:
    return int(tx.exec(select(func.coalesce(func.max(Event.id), 0))).one())


def machine_rows(tx: Session, job_ids: Sequence[int] | None = None) -> list[InstanceRow]:
    """Instance rows that may be a machine: not gone, and either the cloud named it (an instance id) or a
    live attempt is still asking for it. A row of a launch that failed before the cloud answered is none."""
    q = select(InstanceRow).where(col(InstanceRow.state).not_in(GONE_INSTANCE_STATE_VALUES))
    if job_ids is not None:
        q = q.where(col(InstanceRow.job_id).in_(list(job_ids)))
    rows = list(tx.exec(q.order_by(col(InstanceRow.id))))
    asking = live_launch_ids(tx)
    return [r for r in rows if r.instance_id or r.launch_id in asking]


def live_attempts_of(tx: Session, job_ids: Sequence[int]) -> list[Attempt]:
    return list(tx.exec(select(Attempt).where(col(Attempt.job_id).in_(list(job_ids)),
                                              col(Attempt.state).in_(LIVE_ATTEMPT_STATE_VALUES))))


def unexpired_lease_owners(tx: Session, now: datetime) -> list[str]:
    """The owners of every registration (daemon or command) that holds until after ``now``."""
    return list(tx.exec(select(DaemonRow.owner).where(col(DaemonRow.expires_at) > now).order_by(col(DaemonRow.owner))))
