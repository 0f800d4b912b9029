"""Read queries beside ``repo``'s typed operations: plain-column reads for the engine's hot path (one row per
instance per tick, no ORM objects) and the views ``orch status`` / ``down`` / ``events`` need. Each takes the
Session of the caller's transaction. No other module writes SQL for these."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import ARRAY, Text, any_, case, cast, func, literal, null, update
from sqlmodel import Session, col, select

from orchestrator.engine.states import FINAL_ATTEMPT_STATES, AttemptState, DesiredState
from orchestrator.store.models import (
    GONE_INSTANCE_STATE_VALUES,
    Attempt,
    CheckpointRow,
    InstanceRow,
    Job,
    Spend,
)
from orchestrator.store.pg_arrays import pg_array_literal
from orchestrator.store.plain_rows import plain_rows

#: IN (live states), not NOT IN (final ones): the state index serves it while the history grows.
_LIVE = [s.value for s in AttemptState if s not in FINAL_ATTEMPT_STATES]
LIVE_ATTEMPT_STATE_VALUES = _LIVE   # the live attempt states' stored values
_CHUNK = 500
CHUNK = _CHUNK   # how many ids one IN (...) carries


def _chunks(values: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for i in range(0, len(values), _CHUNK):
        yield values[i:i + _CHUNK]


def _id_chunks(tx: Session, values: Sequence[Any]) -> Iterator[Sequence[Any]]:
    """``values`` in chunks for ``_one_of``: one on PostgreSQL (one array parameter, whatever its length; a
    10k restart's reads were 20 statements each), else of ``_CHUNK``."""
    if tx.get_bind().dialect.name == "postgresql":
        if values:
            yield values
        return
    yield from _chunks(values)


def _one_of(tx: Session, column: Any, values: Sequence[Any]) -> Any:
    """``column IN (values)``; on PostgreSQL ``column = ANY(:array)``, one parameter instead of one per value:
    psycopg parses a query with hundreds of placeholders again on every execution (at a 10k restart the
    chunked reads' 60-odd queries cost ~0.2 s of CPU that way)."""
    if tx.get_bind().dialect.name == "postgresql":
        if set(map(type, values)) == {int}:
            # Ids as one array literal the server casts: psycopg's dumping of a list, a Python call per element,
            # was ~0.3 s of CPU under the profiler for a 10k restart's three reads by id.
            return column == any_(cast(literal(pg_array_literal(list(values)), Text), ARRAY(column.type)))
        return column == any_(literal(list(values), ARRAY(column.type)))
    return column.in_(list(values))


# -- the engine's reads ---------------------------------------------------------------------------------

class JobColumns(NamedTuple):
    id: int
    name: str
    manifest_hash: str
    status: str
    desired_state: str
    relaunch_count: int
    created_at: datetime


def job_columns(tx: Session, *, active: bool, lease_owner: str | None = None) -> list[JobColumns]:
    """Active (or not active) jobs by id, without their manifests; only ``lease_owner``'s when given."""
    q = select(Job.id, Job.name, Job.manifest_hash, Job.status, Job.desired_state,  # type: ignore[call-overload]
               Job.relaunch_count, Job.created_at)
    q = (q.where(Job.desired_state == DesiredState.ACTIVE.value) if active
         else q.where(Job.desired_state != DesiredState.ACTIVE.value))
    if lease_owner is not None:
        q = q.where(Job.lease_owner == lease_owner)
    return [JobColumns(*r) for r in plain_rows(tx, q.order_by(col(Job.id)))]


class ManifestText(NamedTuple):
    id: int
    manifest_hash: str
    manifest: str          # the stored JSON, as text
    applied_at: datetime
    #: The document's top-level ``name`` when the server says it is a string (PostgreSQL's ``->>``, which like
    #: Python's decoder takes the last of duplicate keys); None: not known (SQLite), or not a string.
    name: str | None


def manifest_texts(tx: Session, ids: Sequence[int]) -> list[ManifestText]:
    """Jobs' manifests as JSON text (parsed by the caller straight into the typed model)."""
    name: Any = null()
    if tx.get_bind().dialect.name == "postgresql":
        picked = col(Job.manifest)["name"]
        name = case((func.json_typeof(picked) == "string", picked.as_string()), else_=null())
    out: list[ManifestText] = []
    for chunk in _id_chunks(tx, list(ids)):
        q = select(Job.id, Job.manifest_hash, cast(Job.manifest, Text), Job.applied_at,  # type: ignore[call-overload]
                   name)
        out.extend(ManifestText(*r) for r in plain_rows(tx, q.where(_one_of(tx, col(Job.id), chunk))))
    return out


def jobs_by_ids(tx: Session, ids: Sequence[int]) -> list[Job]:
    return [row for chunk in _chunks(ids) for row in tx.exec(select(Job).where(_one_of(tx, col(Job.id), chunk)))]


def spend_totals(tx: Session, job_ids: Sequence[int]) -> dict[int, float]:
    """Each job's total spend (0.0 for none)."""
    out: dict[int, float] = {}
    for chunk in _id_chunks(tx, job_ids):
        sums = dict(tx.exec(select(Spend.job_id, func.sum(Spend.usd))  # type: ignore[call-overload]
                            .where(_one_of(tx, col(Spend.job_id), chunk)).group_by(col(Spend.job_id))).all())
        out.update({job_id: float(sums.get(job_id) or 0.0) for job_id in chunk})
    return out


def spend_marks(tx: Session, attempt_ids: Sequence[int]) -> dict[int, datetime | None]:
    """Up to when each attempt's spend is recorded (None: nothing yet), in one grouped query per chunk."""
    out: dict[int, datetime | None] = {i: None for i in attempt_ids}
    for chunk in _id_chunks(tx, list(attempt_ids)):
        q = (select(Spend.attempt_id, func.max(Spend.to_ts))  # type: ignore[call-overload]
             .where(_one_of(tx, col(Spend.attempt_id), chunk)).group_by(col(Spend.attempt_id)))
        out.update({int(a): t for a, t in tx.exec(q).all()})
    return out


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
    heard_beat: datetime | None
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
    actual_price_hr: float | None


def _attempt_columns():  # type: ignore[no-untyped-def]
    return (select(Attempt.id, Attempt.job_id, Attempt.launch_id, Attempt.state,  # type: ignore[call-overload]
                   Attempt.created_at, Attempt.started_at, Attempt.ended_at, Attempt.checkpoint_restored,
                   Attempt.reason, Attempt.node_rank, Attempt.generation, Attempt.end_cause, Attempt.drain_until,
                   Attempt.heard_at, Attempt.unreachable_since, Attempt.heard_beat, InstanceRow.instance_id,
                   InstanceRow.provider,
                   InstanceRow.instance_type, InstanceRow.region,
                   InstanceRow.zone, InstanceRow.market, InstanceRow.gpu, InstanceRow.gpu_count, InstanceRow.price_hr,
                   InstanceRow.created_at, InstanceRow.actual_price_hr)
            .join(InstanceRow, InstanceRow.launch_id == Attempt.launch_id))


def _attempts(tx: Session, q: Any) -> list[AttemptColumns]:
    return [AttemptColumns(*r) for r in plain_rows(tx, q)]


def _leased_to(q: Any, lease_owner: str | None) -> Any:
    if lease_owner is None:
        return q
    return q.join(Job, Job.id == Attempt.job_id).where(Job.lease_owner == lease_owner)


def set_liveness(tx: Session, attempt_id: int, heard_at: datetime | None,
                 unreachable_since: datetime | None, heard_beat: datetime | None = None) -> None:
    """An attempt's liveness marks (orchestrator/engine/liveness.py), as given."""
    tx.exec(update(Attempt).where(col(Attempt.id) == attempt_id)  # type: ignore[call-overload]
            .values(heard_at=heard_at, unreachable_since=unreachable_since, heard_beat=heard_beat))


def live_attempt_columns(tx: Session, lease_owner: str | None = None) -> list[AttemptColumns]:
    """Live attempts (of ``lease_owner``'s jobs only, when given)."""
    q = _leased_to(_attempt_columns().where(col(Attempt.state).in_(_LIVE)), lease_owner)
    return _attempts(tx, q.order_by(col(Attempt.id)))


def draining_attempt_columns(tx: Session, now: datetime, lease_owner: str | None = None) -> list[AttemptColumns]:
    """Attempts whose ``drain_until`` is after ``now`` (of ``lease_owner``'s jobs only, when given)."""
    q = _leased_to(_attempt_columns().where(col(Attempt.drain_until) > now), lease_owner)
    return _attempts(tx, q.order_by(col(Attempt.id)))


def job_attempt_columns(tx: Session, job_id: int) -> list[AttemptColumns]:
    return _attempts(tx, _attempt_columns().where(Attempt.job_id == job_id).order_by(col(Attempt.id)))


def attempt_columns_by_launch_ids(tx: Session, launch_ids: Sequence[str]) -> list[AttemptColumns]:
    ids = list(dict.fromkeys(launch_ids))
    return [a for chunk in _chunks(ids)
            for a in _attempts(tx, _attempt_columns().where(_one_of(tx, col(Attempt.launch_id), chunk)))]


def active_job_ids(tx: Session, job_ids: Sequence[int]) -> set[int]:
    """Those of ``job_ids`` whose desired state is active (whoever holds them)."""
    return set(tx.exec(select(Job.id).where(col(Job.id).in_(list(job_ids)),
                                            Job.desired_state == DesiredState.ACTIVE.value)))


def live_launch_ids(tx: Session) -> set[str]:
    return set(tx.exec(select(Attempt.launch_id).where(col(Attempt.state).in_(_LIVE))))


class InstanceColumns(NamedTuple):
    launch_id: str
    instance_id: str | None
    state: str
    raw_state: str | None
    public_ip: str | None
    job_id: int | None
    actual_price_hr: float | None


def unended_instance_columns(tx: Session, provider: str, lease_owner: str | None = None) -> list[InstanceColumns]:
    """The provider's instance rows not yet gone (of ``lease_owner``'s jobs only, when given)."""
    q = (select(InstanceRow.launch_id, InstanceRow.instance_id, InstanceRow.state,  # type: ignore[call-overload]
                InstanceRow.raw_state, InstanceRow.public_ip, InstanceRow.job_id, InstanceRow.actual_price_hr)
         .where(InstanceRow.provider == provider, col(InstanceRow.state).not_in(GONE_INSTANCE_STATE_VALUES)))
    if lease_owner is not None:
        q = q.join(Job, Job.id == InstanceRow.job_id).where(Job.lease_owner == lease_owner)
    return [InstanceColumns(*r) for r in plain_rows(tx, q)]


def checkpoint_recorded(tx: Session, job_id: int, uri: str) -> bool:
    found = tx.exec(select(CheckpointRow.id).where(CheckpointRow.job_id == job_id, CheckpointRow.uri == uri))
    return found.first() is not None


# -- what the fence looks up ----------------------------------------------------------------------------

def instance_attempt(tx: Session, provider: str, instance_id: str) -> tuple[int, str] | None:
    """The job and state of the attempt a cloud instance was launched for (None: unknown to the store)."""
    found = tx.exec(select(Attempt.job_id, Attempt.state)  # type: ignore[call-overload]
                    .join(InstanceRow, InstanceRow.launch_id == Attempt.launch_id)
                    .where(InstanceRow.provider == provider, InstanceRow.instance_id == instance_id)).first()
    return (int(found[0]), str(found[1])) if found else None


def launch_attempt(tx: Session, launch_id: str) -> tuple[int, str] | None:
    """The job and state of the attempt with ``launch_id`` (None: unknown)."""
    found = tx.exec(select(Attempt.job_id, Attempt.state).where(Attempt.launch_id == launch_id)).first()  # type: ignore[call-overload]
    return (int(found[0]), str(found[1])) if found else None
