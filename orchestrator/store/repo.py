"""The store's typed operations. Each takes the Session of the caller's transaction, so several
operations commit together or not at all::

    with store.transaction() as tx:
        result = apply_jobs(tx, specs, prune=True)
        record_event(tx, "apply", f"{len(result.created)} created")

Rows returned are the SQLModel table objects; after the transaction they are detached but readable.
Times are injected (``now=``) where the caller has a clock; else the current UTC time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from sqlmodel import Session, col, select

from orchestrator.clock import utcnow
from orchestrator.engine.events import EventKind
from orchestrator.engine.states import DesiredState, JobStatus
from orchestrator.redaction import safe_line
from orchestrator.store.attempt_rows import (
    create_attempt,
    get_attempt,
    get_attempt_by_launch_id,
    latest_generation,
    list_attempts,
    transition_attempt,
)
from orchestrator.store.history import (
    append_event,
    last_spend_until,
    latest_checkpoint,
    list_events,
    record_checkpoint,
    record_event,
    record_spend,
    spend_by_job,
    total_spend,
)
from orchestrator.store.instance_rows import (
    InstanceRecord,
    get_instance,
    get_instance_by_launch_id,
    list_instances,
    mark_instance_gone,
    record_instance,
    update_instances,
)
from orchestrator.store.models import Job
from orchestrator.store.row_errors import InvalidTransitionError, NotFoundError

if TYPE_CHECKING:
    from orchestrator.manifest import Manifest

# The jobs are here; attempts (attempt_rows.py), machines (instance_rows.py) and history (history.py: checkpoints,
# events, spend) are gathered so callers keep one ``repo`` namespace.
__all__ = [
    "AppliedJob",
    "ApplyResult",
    "Change",
    "InstanceRecord",
    "InvalidTransitionError",
    "NotFoundError",
    "append_event",
    "apply_jobs",
    "count_relaunch",
    "create_attempt",
    "get_attempt",
    "get_attempt_by_launch_id",
    "get_instance",
    "get_instance_by_launch_id",
    "get_job",
    "get_job_by_id",
    "last_spend_until",
    "latest_checkpoint",
    "latest_generation",
    "list_attempts",
    "list_events",
    "list_instances",
    "list_jobs",
    "mark_instance_gone",
    "record_checkpoint",
    "record_event",
    "record_instance",
    "record_spend",
    "require_job",
    "set_desired_state",
    "set_job_status",
    "spend_by_job",
    "total_spend",
    "transition_attempt",
    "update_instances",
    "upsert_job",
]


# -- jobs ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class AppliedJob:
    """A job as ``orch apply`` records it: the validated manifest, its content hash and its source file.

    The store keeps the manifest's canonical JSON (``Manifest.to_json()``); readers parse it back once per
    hash (``orchestrator.store.sqlstore``)."""

    manifest: Manifest
    manifest_hash: str
    source_path: str | None = None

    @property
    def name(self) -> str:
        return self.manifest.name

    @classmethod
    def from_loaded(cls, manifest: Manifest, source: Path | str, content_hash: str) -> AppliedJob:
        """From one ``orchestrator.manifest.LoadedManifest`` (``AppliedJob.from_loaded(*loaded)``)."""
        return cls(manifest, content_hash, str(source))


class Change(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    PRUNED = "pruned"


@dataclass(frozen=True, slots=True)
class ApplyResult:
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    pruned: tuple[str, ...] = ()
    changes: dict[str, Change] = field(default_factory=dict)


def get_job(tx: Session, name: str) -> Job | None:
    return tx.exec(select(Job).where(Job.name == name)).first()


def require_job(tx: Session, name: str) -> Job:
    job = get_job(tx, name)
    if job is None:
        raise NotFoundError(f"no job named {name!r}")
    return job


def get_job_by_id(tx: Session, job_id: int) -> Job | None:
    return tx.get(Job, job_id)


def list_jobs(tx: Session, *, desired_states: Sequence[DesiredState] | None = None,
              statuses: Sequence[JobStatus] | None = None, include_deleted: bool = False) -> list[Job]:
    """Jobs by name. Deleted jobs are left out unless asked for (or named in ``desired_states``)."""
    query = select(Job)
    if desired_states is not None:
        query = query.where(col(Job.desired_state).in_([s.value for s in desired_states]))
    elif not include_deleted:
        query = query.where(Job.desired_state != DesiredState.DELETED.value)
    if statuses is not None:
        query = query.where(col(Job.status).in_([s.value for s in statuses]))
    return list(tx.exec(query.order_by(Job.name)))


def upsert_job(tx: Session, spec: AppliedJob, *, now: datetime | None = None) -> tuple[Job, Change]:
    """Create the job, or update its manifest when the hash differs. Re-applying a pruned or deleted
    job makes it active again (and pending, if it had finished)."""
    now = now or utcnow()
    job = get_job(tx, spec.name)
    if job is None:
        job = Job(name=spec.name, manifest=spec.manifest.to_json(), manifest_hash=spec.manifest_hash,
                  source_path=spec.source_path, applied_at=now, created_at=now, updated_at=now)
        tx.add(job)
        tx.flush()
        append_event(tx, EventKind.JOB_CREATED, f"job {spec.name} created", job.id, {"hash": spec.manifest_hash}, now)
        return job, Change.CREATED
    revived = job.desired_state != DesiredState.ACTIVE.value
    if job.manifest_hash == spec.manifest_hash and not revived:
        if job.source_path != spec.source_path:
            job.source_path = spec.source_path
            tx.add(job)
        return job, Change.UNCHANGED
    previous = job.manifest_hash
    job.manifest = spec.manifest.to_json()
    job.manifest_hash = spec.manifest_hash
    job.source_path = spec.source_path
    job.desired_state = DesiredState.ACTIVE.value
    job.applied_at = now
    job.updated_at = now
    if revived and JobStatus(job.status).is_final:
        job.status = JobStatus.PENDING.value
        job.status_reason = None
        job.relaunch_count = 0
    tx.add(job)
    tx.flush()
    append_event(tx, EventKind.JOB_UPDATED, f"job {spec.name} updated", job.id,
           {"hash": spec.manifest_hash, "previous_hash": previous, "revived": revived}, now)
    return job, Change.UPDATED


def apply_jobs(tx: Session, specs: Sequence[AppliedJob], *, prune: bool = False,
               now: datetime | None = None) -> ApplyResult:
    """Make the jobs table hold exactly ``specs`` as active jobs (with ``prune``: others become pruned).

    Runs inside the caller's transaction: if anything raises, nothing of it is kept.
    """
    now = now or utcnow()
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"job {dup!r} appears twice in one apply")
    changes: dict[str, Change] = {}
    for spec in specs:
        _, change = upsert_job(tx, spec, now=now)
        changes[spec.name] = change
    if prune:
        for job in list_jobs(tx, desired_states=[DesiredState.ACTIVE]):
            if job.name not in changes:
                set_desired_state(tx, job.name, DesiredState.PRUNED, now=now)
                changes[job.name] = Change.PRUNED
    by = {c: tuple(sorted(n for n, v in changes.items() if v is c)) for c in Change}
    return ApplyResult(by[Change.CREATED], by[Change.UPDATED], by[Change.UNCHANGED], by[Change.PRUNED], changes)


def set_desired_state(tx: Session, name: str, state: DesiredState, *, now: datetime | None = None) -> Job:
    now = now or utcnow()
    job = require_job(tx, name)
    if job.desired_state != state.value:
        job.desired_state = state.value
        job.updated_at = now
        tx.add(job)
        append_event(tx, EventKind(f"job.{state.value}"), f"job {name} is now {state.value}", job.id, {}, now)
    return job


def set_job_status(tx: Session, job: Job | int, status: JobStatus, reason: str | None = None, *,
                   now: datetime | None = None) -> Job:
    """Set a job's status (and why), with an event when it changes."""
    now = now or utcnow()
    reason = safe_line(reason, 4000) if reason is not None else None
    row = _job(tx, job)
    if row.status != status.value or row.status_reason != reason:
        old = row.status
        row.status = status.value
        row.status_reason = reason
        row.updated_at = now
        tx.add(row)
        append_event(tx, EventKind.JOB_STATUS,
               f"job {row.name}: {old} -> {status.value}" + (f" ({reason})" if reason else ""), row.id,
               {"from": old, "to": status.value, "reason": reason}, now)
    return row


def count_relaunch(tx: Session, job: Job | int, *, now: datetime | None = None) -> int:
    """Add one to the job's relaunch count and return the new count."""
    row = _job(tx, job)
    row.relaunch_count += 1
    row.updated_at = now or utcnow()
    tx.add(row)
    return row.relaunch_count


def _job(tx: Session, job: Job | int) -> Job:
    job_id = job if isinstance(job, int) else job.id
    row = tx.get(Job, job_id) if job_id is not None else None
    if row is None:
        raise NotFoundError(f"no job with id {job_id}")
    return row
