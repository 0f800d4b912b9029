"""Read queries beside ``repo``'s typed operations: plain-column reads for the engine's hot path (one row per
instance per tick, no ORM objects) and the views ``orch status`` / ``down`` / ``events`` need. Each takes the
Session of the caller's transaction. No other module writes SQL for these."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import func, insert, update
from sqlmodel import Session, col, select

from orchestrator.store.models import (
    FINAL_ATTEMPT_STATES,
    GONE_INSTANCE_STATE_VALUES,
    Attempt,
    AttemptState,
    CheckpointRow,
    DesiredState,
    Event,
    InstanceRow,
    Job,
    Spend,
)

#: IN (live states), not NOT IN (final ones): the state index serves it while the history grows.
_LIVE = [s.value for s in AttemptState if s not in FINAL_ATTEMPT_STATES]
_CHUNK = 500


def _chunks(values: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for i in range(0, len(values), _CHUNK):
        yield values[i:i + _CHUNK]


# -- the engine's reads ---------------------------------------------------------------------------------

class JobColumns(NamedTuple):
    id: int
    name: str
    manifest_hash: str
    status: str
    desired_state: str
    relaunch_count: int
    created_at: datetime


def job_columns(tx: Session, *, active: bool) -> list[JobColumns]:
    """Active (or not active) jobs by id, without their manifests."""
    q = select(Job.id, Job.name, Job.manifest_hash, Job.status, Job.desired_state,  # type: ignore[call-overload]
               Job.relaunch_count, Job.created_at)
    q = (q.where(Job.desired_state == DesiredState.ACTIVE.value) if active
         else q.where(Job.desired_state != DesiredState.ACTIVE.value))
    return [JobColumns(*r) for r in tx.exec(q.order_by(col(Job.id))).all()]


def jobs_by_ids(tx: Session, ids: Sequence[int]) -> list[Job]:
    return [row for chunk in _chunks(ids) for row in tx.exec(select(Job).where(col(Job.id).in_(list(chunk))))]


def spend_totals(tx: Session, job_ids: Sequence[int]) -> dict[int, float]:
    """Each job's total spend (0.0 for none)."""
    out: dict[int, float] = {}
    for chunk in _chunks(job_ids):
        sums = dict(tx.exec(select(Spend.job_id, func.sum(Spend.usd))  # type: ignore[call-overload]
                            .where(col(Spend.job_id).in_(list(chunk))).group_by(col(Spend.job_id))).all())
        out.update({job_id: float(sums.get(job_id) or 0.0) for job_id in chunk})
    return out


class SpendRow(NamedTuple):
    job_id: int
    attempt_id: int
    from_ts: datetime
    to_ts: datetime
    usd: float


def insert_spend(tx: Session, rows: Sequence[SpendRow]) -> None:
    """One bulk insert."""
    tx.execute(insert(Spend), [r._asdict() for r in rows])


class AttemptColumns(NamedTuple):
    """An attempt joined with its instance row (the offer it was launched on lives there)."""

    id: int
    job_id: int
    launch_id: str
    state: str
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    checkpoint_restored: str | None
    reason: str | None
    node_rank: int
    generation: int
    end_cause: str | None
    drain_until: datetime | None
    heard_at: datetime | None
    unreachable_since: datetime | None
    instance_id: str | None
    provider: str
    instance_type: str
    region: str
    zone: str | None
    market: str
    gpu: str
    gpu_count: int
    price_hr: float
    instance_created_at: datetime


def _attempt_columns():  # type: ignore[no-untyped-def]
    return (select(Attempt.id, Attempt.job_id, Attempt.launch_id, Attempt.state,  # type: ignore[call-overload]
                   Attempt.created_at, Attempt.started_at, Attempt.ended_at, Attempt.checkpoint_restored,
                   Attempt.reason, Attempt.node_rank, Attempt.generation, Attempt.end_cause, Attempt.drain_until,
                   Attempt.heard_at, Attempt.unreachable_since, InstanceRow.instance_id, InstanceRow.provider,
                   InstanceRow.instance_type, InstanceRow.region,
                   InstanceRow.zone, InstanceRow.market, InstanceRow.gpu, InstanceRow.gpu_count, InstanceRow.price_hr,
                   InstanceRow.created_at)
            .join(InstanceRow, InstanceRow.launch_id == Attempt.launch_id))


def _attempts(tx: Session, q: Any) -> list[AttemptColumns]:
    return [AttemptColumns(*r) for r in tx.exec(q).all()]


def set_liveness(tx: Session, attempt_id: int, heard_at: datetime | None,
                 unreachable_since: datetime | None) -> None:
    """An attempt's liveness marks (orchestrator/engine/liveness.py), as given."""
    tx.exec(update(Attempt).where(col(Attempt.id) == attempt_id)  # type: ignore[call-overload]
            .values(heard_at=heard_at, unreachable_since=unreachable_since))


def live_attempt_columns(tx: Session) -> list[AttemptColumns]:
    return _attempts(tx, _attempt_columns().where(col(Attempt.state).in_(_LIVE)).order_by(col(Attempt.id)))


def draining_attempt_columns(tx: Session, now: datetime) -> list[AttemptColumns]:
    """Attempts whose ``drain_until`` is after ``now``."""
    return _attempts(tx, _attempt_columns().where(col(Attempt.drain_until) > now).order_by(col(Attempt.id)))


def job_attempt_columns(tx: Session, job_id: int) -> list[AttemptColumns]:
    return _attempts(tx, _attempt_columns().where(Attempt.job_id == job_id).order_by(col(Attempt.id)))


def attempt_columns_by_launch_ids(tx: Session, launch_ids: Sequence[str]) -> list[AttemptColumns]:
    ids = list(dict.fromkeys(launch_ids))
    return [a for chunk in _chunks(ids)
            for a in _attempts(tx, _attempt_columns().where(col(Attempt.launch_id).in_(list(chunk))))]


def live_launch_ids(tx: Session) -> set[str]:
    return set(tx.exec(select(Attempt.launch_id).where(col(Attempt.state).in_(_LIVE))))


class InstanceColumns(NamedTuple):
    launch_id: str
    instance_id: str | None
    state: str
    raw_state: str | None
    public_ip: str | None
    job_id: int | None


def unended_instance_columns(tx: Session, provider: str) -> list[InstanceColumns]:
    """The provider's instance rows not yet gone."""
    q = (select(InstanceRow.launch_id, InstanceRow.instance_id, InstanceRow.state,  # type: ignore[call-overload]
                InstanceRow.raw_state, InstanceRow.public_ip, InstanceRow.job_id)
         .where(InstanceRow.provider == provider, col(InstanceRow.state).not_in(GONE_INSTANCE_STATE_VALUES)))
    return [InstanceColumns(*r) for r in tx.exec(q).all()]


def checkpoint_recorded(tx: Session, job_id: int, uri: str) -> bool:
    found = tx.exec(select(CheckpointRow.id).where(CheckpointRow.job_id == job_id, CheckpointRow.uri == uri))
    return found.first() is not None


# -- what orch status / down / events show --------------------------------------------------------------

def job_names(tx: Session) -> dict[int, str]:
    return {r.id: r.name for r in tx.exec(select(Job)) if r.id is not None}


def jobs_named(tx: Session, names: Sequence[str]) -> dict[int, str]:
    """Ids of the jobs with these names (unknown names are left out)."""
    return {r.id: r.name for r in tx.exec(select(Job).where(col(Job.name).in_(list(names)))) if r.id is not None}


def last_event(tx: Session, job_id: int) -> Event | None:
    return tx.exec(select(Event).where(Event.job_id == job_id).order_by(col(Event.id).desc()).limit(1)).first()


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
                                              col(Attempt.state).in_(_LIVE))))


def unexpired_lease(tx: Session, now: datetime) -> bool:
    """Whether some job is leased to a daemon until after ``now``."""
    found = tx.exec(select(Job.id).where(col(Job.lease_owner).is_not(None), col(Job.lease_expires_at) > now).limit(1))
    return found.first() is not None
