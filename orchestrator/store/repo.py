"""The store's typed operations. Each takes the Session of the caller's transaction, so several
operations commit together or not at all::

    with store.transaction() as tx:
        result = apply_jobs(tx, specs, prune=True)
        record_event(tx, "apply", f"{len(result.created)} created")

Rows returned are the SQLModel table objects; after the transaction they are detached but readable.
Times are injected (``now=``) where the caller has a clock; else the current UTC time.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, case, func, literal, or_, update
from sqlmodel import Session, col, select

from orchestrator.clock import utcnow
from orchestrator.engine.events import REPEATING_EVENTS, EventKind
from orchestrator.engine.states import ATTEMPT_TRANSITIONS, AttemptState, DesiredState, EndCause, JobStatus
from orchestrator.redaction import safe_line
from orchestrator.store.models import GONE_INSTANCE_STATE_VALUES, Attempt, CheckpointRow, Event, InstanceRow, Job, Spend

if TYPE_CHECKING:
    from orchestrator.manifest import Manifest


class NotFoundError(LookupError):
    pass


class InvalidTransitionError(ValueError):
    pass


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
        _event(tx, EventKind.JOB_CREATED, f"job {spec.name} created", job.id, {"hash": spec.manifest_hash}, now)
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
    _event(tx, EventKind.JOB_UPDATED, f"job {spec.name} updated", job.id,
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
        _event(tx, EventKind(f"job.{state.value}"), f"job {name} is now {state.value}", job.id, {}, now)
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
        _event(tx, EventKind.JOB_STATUS,
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


# -- attempts -----------------------------------------------------------------------------------------

def create_attempt(tx: Session, job_id: int, launch_id: str, *, generation: int = 0, node_rank: int = 0,
                   checkpoint_restored: str | None = None, now: datetime | None = None) -> Attempt:
    now = now or utcnow()
    attempt = Attempt(job_id=job_id, launch_id=launch_id, generation=generation, node_rank=node_rank,
                      checkpoint_restored=checkpoint_restored, created_at=now, updated_at=now)
    tx.add(attempt)
    tx.flush()
    return attempt


def get_attempt(tx: Session, attempt_id: int) -> Attempt | None:
    return tx.get(Attempt, attempt_id)


def get_attempt_by_launch_id(tx: Session, launch_id: str) -> Attempt | None:
    return tx.exec(select(Attempt).where(Attempt.launch_id == launch_id)).first()


def list_attempts(tx: Session, job_id: int, *, generation: int | None = None,
                  states: Sequence[AttemptState] | None = None) -> list[Attempt]:
    query = select(Attempt).where(Attempt.job_id == job_id)
    if generation is not None:
        query = query.where(Attempt.generation == generation)
    if states is not None:
        query = query.where(col(Attempt.state).in_([s.value for s in states]))
    return list(tx.exec(query.order_by(col(Attempt.generation), col(Attempt.node_rank))))


def latest_generation(tx: Session, job_id: int) -> int | None:
    return tx.exec(select(func.max(Attempt.generation)).where(Attempt.job_id == job_id)).first()


def transition_attempt(tx: Session, attempt: Attempt | int, to: AttemptState, *, reason: str | None = None,
                       cause: EndCause | None = None, drain_until: datetime | None = None,
                       exit_code: int | None = None, now: datetime | None = None) -> Attempt:
    """Move an attempt along its state machine (engine.states.ATTEMPT_TRANSITIONS); same state is a no-op.

    Sets ``started_at`` on reaching running and ``ended_at`` on reaching an end state. ``cause`` and
    ``drain_until``, when given, are kept (a later step that gives none leaves them as they are).
    Raises InvalidTransitionError for a step backwards or out of an end state.
    """
    now = now or utcnow()
    row = tx.get(Attempt, attempt if isinstance(attempt, int) else attempt.id)
    if row is None:
        raise NotFoundError(f"no attempt {attempt!r}")
    current = AttemptState(row.state)
    if current is to:
        return row
    if to not in ATTEMPT_TRANSITIONS[current]:
        raise InvalidTransitionError(f"attempt {row.launch_id}: cannot go from {current.value} to {to.value}")
    row.state = to.value
    row.updated_at = now
    if to is AttemptState.RUNNING and row.started_at is None:
        row.started_at = now
    if to.is_final:
        row.ended_at = now
    if reason is not None:
        row.reason = safe_line(reason, 4000)
    if cause is not None:
        row.end_cause = cause.value
    if drain_until is not None:
        row.drain_until = drain_until
    if exit_code is not None:
        row.exit_code = exit_code
    tx.add(row)
    _event(tx, EventKind.ATTEMPT_STATE, f"attempt {row.launch_id}: {current.value} -> {to.value}"
           + (f" ({reason})" if reason else ""), row.job_id,
           {"launch_id": row.launch_id, "from": current.value, "to": to.value, "reason": reason,
            "cause": row.end_cause, "exit_code": exit_code}, now)
    return row


# -- instances ----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """What is known of one machine. ``None`` fields leave the stored value as it is on update."""

    provider: str
    launch_id: str
    owner: str
    job_id: int | None = None
    instance_id: str | None = None
    instance_type: str | None = None
    region: str | None = None
    zone: str | None = None
    market: str | None = None
    price_hr: float | None = None
    actual_price_hr: float | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    state: str | None = None
    raw_state: str | None = None
    public_ip: str | None = None
    ssh_port: int | None = None
    ssh_user: str | None = None
    host_keys: tuple[str, ...] | None = None


_INSTANCE_FIELDS = ("job_id", "instance_id", "instance_type", "region", "zone", "market", "price_hr", "actual_price_hr",
                    "gpu", "gpu_count", "state", "raw_state", "public_ip", "ssh_port", "ssh_user")
_instance_values = operator.attrgetter(*_INSTANCE_FIELDS)     # a record's values of those, in one C call


def record_instance(tx: Session, rec: InstanceRecord, *, now: datetime | None = None) -> InstanceRow:
    """Insert or update the instance row keyed by ``launch_id`` (idempotent; safe to repeat)."""
    now = now or utcnow()
    row = get_instance_by_launch_id(tx, rec.launch_id)
    if row is None:
        row = InstanceRow(provider=rec.provider, launch_id=rec.launch_id, owner=rec.owner, created_at=now)
    for name in _INSTANCE_FIELDS:
        value = getattr(rec, name)
        if value is not None:
            setattr(row, name, value)
    if rec.host_keys is not None:
        row.host_keys = list(rec.host_keys)
    row.provider = rec.provider
    row.owner = rec.owner
    if row.state in GONE_INSTANCE_STATE_VALUES and row.terminated_at is None:
        row.terminated_at = now
    row.updated_at = now
    tx.add(row)
    tx.flush()
    return row


def update_instances(tx: Session, recs: Sequence[InstanceRecord], *, now: datetime) -> None:
    """``record_instance`` for many rows that exist already (keyed by launch id), as one executemany UPDATE per
    set of given fields: no ORM object per row (the sync records a whole fleet's reported prices at once)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for rec in recs:
        given = [(n, v) for n, v in zip(_INSTANCE_FIELDS, _instance_values(rec), strict=True) if v is not None]
        names = tuple(n for n, _ in given)
        params = {f"v_{n}": v for n, v in given}
        if rec.host_keys is not None:
            names, params["v_host_keys"] = (*names, "host_keys"), list(rec.host_keys)
        params.update(k_launch_id=rec.launch_id, v_provider=rec.provider, v_owner=rec.owner, v_now=now)
        groups.setdefault(names, []).append(params)
    table = InstanceRow.__table__  # type: ignore[attr-defined]
    stamp = bindparam("v_now", type_=table.c.updated_at.type)
    for names, rows in groups.items():
        if "host_keys" not in names:
            _update_plain_instances(tx, names, rows, now)
            continue
        values: dict[str, Any] = {n: bindparam(f"v_{n}") for n in (*names, "provider", "owner")}
        state = values.get("state", table.c.state)
        # OR of equalities, not IN: an expanding IN cannot be used with executemany
        gone = table.c.terminated_at.is_(None) & or_(*(state == literal(v) for v in GONE_INSTANCE_STATE_VALUES))
        values.update(updated_at=stamp, terminated_at=case((gone, stamp), else_=table.c.terminated_at))
        tx.connection().execute(update(table).where(table.c.launch_id == bindparam("k_launch_id")).values(values),
                                rows)


def _update_plain_instances(tx: Session, names: tuple[str, ...], rows: list[dict[str, Any]], now: datetime) -> None:
    """``update_instances``' statement for fields of plain values (text, numbers), handed to the driver's
    executemany as it is: SQLAlchemy's per-row parameter processing cost ~0.4 s at 10k rows (a first tick
    records every machine's price). The one typed value, the time, is converted once by its column type."""
    conn = tx.connection()
    table = InstanceRow.__table__  # type: ignore[attr-defined]
    if conn.dialect.name == "postgresql":
        _update_plain_instances_pg(conn, names, rows, now)
        return
    style = "%({})s" if conn.dialect.paramstyle == "pyformat" else ":{}"
    sets = [f"{n} = {style.format('v_' + n)}" for n in (*names, "provider", "owner")]
    # (the cast: PostgreSQL deduces one type per parameter, varchar from the SET and text from the IN)
    state = f"CAST({style.format('v_state')} AS VARCHAR)" if "state" in names else "state"
    gone = ", ".join(f"'{v}'" for v in GONE_INSTANCE_STATE_VALUES)     # our own constants: no quotes inside
    stamp = style.format("v_now")
    sets += [f"updated_at = {stamp}",
             f"terminated_at = CASE WHEN terminated_at IS NULL AND {state} IN ({gone}) THEN {stamp} "
             "ELSE terminated_at END"]
    process = table.c.updated_at.type.bind_processor(conn.dialect)     # the column type's, as SQLAlchemy would
    when = process(now) if process is not None else now
    conn.exec_driver_sql(f"UPDATE instances SET {', '.join(sets)} WHERE launch_id = {style.format('k_launch_id')}",
                         [{**row, "v_now": when} for row in rows])


def _update_plain_instances_pg(conn: Any, names: tuple[str, ...], rows: list[dict[str, Any]], now: datetime) -> None:
    """PostgreSQL: the whole group as one UPDATE ... FROM unnest(column arrays), not an execution per row."""
    table = InstanceRow.__table__  # type: ignore[attr-defined]
    last = {row["k_launch_id"]: row for row in rows}    # one row per key, the last given (as executemany would)
    columns = (*names, "provider", "owner")
    arrays = {f"a_{n}": _pg_array([row[f"v_{n}"] for row in last.values()]) for n in columns}
    arrays["a_k"] = _pg_array(list(last))
    casts = ", ".join(f"CAST(%(a_{n})s AS {table.c[n].type.compile(dialect=conn.dialect)}[])" for n in columns)
    state = "v.state" if "state" in names else "instances.state"
    gone = ", ".join(f"'{v}'" for v in GONE_INSTANCE_STATE_VALUES)
    sets = ", ".join(f"{n} = v.{n}" for n in columns)
    conn.exec_driver_sql(
        f"UPDATE instances SET {sets}, updated_at = %(now)s, terminated_at = CASE WHEN instances.terminated_at IS "
        f"NULL AND {state} IN ({gone}) THEN %(now)s ELSE instances.terminated_at END "
        f"FROM unnest(CAST(%(a_k)s AS VARCHAR[]), {casts}) AS v(k, {', '.join(columns)}) "
        "WHERE instances.launch_id = v.k", {**arrays, "now": now})


def _pg_array(values: list[Any]) -> str:
    """A PostgreSQL array literal (text the server casts): psycopg's dumping of each element of a list cost
    more than the statement. Text is quoted with its backslashes and quotes escaped; None is NULL. A column
    of text alone, or of floats or ints alone, is joined and escaped whole (a first tick writes 11 columns of
    10k machines: a Python call per value was ~0.1 s)."""
    kinds = set(map(type, values))
    if kinds == {str}:
        joined = _SEP.join(values)
        if joined.count(_SEP) == len(values) - 1:       # no value holds the separator
            escaped = joined.replace("\\", "\\\\").replace('"', '\\"')
            return '{"' + escaped.replace(_SEP, '","') + '"}'
    elif kinds and kinds <= {int, float}:
        return "{" + ",".join(map(repr, values)) + "}"

    def one(v: Any) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(v)
    return "{" + ",".join(map(one, values)) + "}"


_SEP = "\x1f"


def get_instance_by_launch_id(tx: Session, launch_id: str) -> InstanceRow | None:
    return tx.exec(select(InstanceRow).where(InstanceRow.launch_id == launch_id)).first()


def get_instance(tx: Session, provider: str, instance_id: str) -> InstanceRow | None:
    return tx.exec(select(InstanceRow).where(InstanceRow.provider == provider,
                                             InstanceRow.instance_id == instance_id)).first()


def list_instances(tx: Session, *, job_id: int | None = None, provider: str | None = None,
                   live_only: bool = False) -> list[InstanceRow]:
    """Instances, oldest first; ``live_only`` leaves out terminated and preempted ones."""
    query = select(InstanceRow)
    if job_id is not None:
        query = query.where(InstanceRow.job_id == job_id)
    if provider is not None:
        query = query.where(InstanceRow.provider == provider)
    if live_only:
        query = query.where(col(InstanceRow.state).not_in(GONE_INSTANCE_STATE_VALUES))
    return list(tx.exec(query.order_by(col(InstanceRow.id))))


def mark_instance_gone(tx: Session, launch_id: str, state: str = "terminated", raw_state: str | None = None, *,
                       now: datetime | None = None) -> InstanceRow:
    row = get_instance_by_launch_id(tx, launch_id)
    if row is None:
        raise NotFoundError(f"no instance with launch id {launch_id}")
    if state not in GONE_INSTANCE_STATE_VALUES:
        raise ValueError(f"{state!r} is not a gone state ({', '.join(GONE_INSTANCE_STATE_VALUES)})")
    now = now or utcnow()
    row.state = state
    if raw_state is not None:
        row.raw_state = raw_state
    row.terminated_at = row.terminated_at or now
    row.updated_at = now
    tx.add(row)
    return row


# -- checkpoints, events, spend -----------------------------------------------------------------------

def record_checkpoint(tx: Session, job_id: int, uri: str, *, attempt_id: int | None = None,
                      step: int | None = None, committed_at: datetime | None = None) -> CheckpointRow:
    row = CheckpointRow(job_id=job_id, attempt_id=attempt_id, uri=uri, step=step,
                        committed_at=committed_at or utcnow())
    tx.add(row)
    tx.flush()
    _event(tx, EventKind.CHECKPOINT, f"checkpoint {uri}" + (f" at step {step}" if step is not None else ""), job_id,
           {"uri": uri, "step": step, "attempt_id": attempt_id}, row.committed_at)
    return row


def latest_checkpoint(tx: Session, job_id: int) -> CheckpointRow | None:
    """The most recently committed checkpoint of the job, or None."""
    query = (select(CheckpointRow).where(CheckpointRow.job_id == job_id)
             .order_by(col(CheckpointRow.committed_at).desc(), col(CheckpointRow.id).desc()))
    return tx.exec(query).first()


def record_event(tx: Session, kind: EventKind, message: str = "", *, job_id: int | None = None,
                 data: dict[str, Any] | None = None, ts: datetime | None = None) -> Event:
    """Record one event; ``data`` must be JSON-serialisable. Events are never deleted. ``kind`` must be an
    ``EventKind`` member (or its text): any other string raises ``ValueError``, so no kind is spelled twice.

    A repeat of a condition (kind in ``REPEATING_EVENTS``; same job, kind and message as one of the job's
    events since its last event of another kind) is not a new row: that row's ``count`` rises, its
    ``last_ts`` and ``data`` become this occurrence's. Returns the row written or updated."""
    at = ts or utcnow()
    kind = EventKind(kind)
    if kind in REPEATING_EVENTS and job_id is not None:
        seen = _same_condition(tx, kind, safe_line(message, 4000), job_id)
        if seen is not None:
            seen.count += 1
            seen.last_ts = at
            seen.data = _redacted(data or {})
            tx.add(seen)
            return seen
    return _event(tx, kind, message, job_id, data or {}, at)


#: How far back a repeat is looked for: a waiting job cycles through a few conditions (one per offer tried).
_REPEAT_LOOKBACK = 16


def _same_condition(tx: Session, kind: EventKind, message: str, job_id: int) -> Event | None:
    """The job's event this one repeats: among its latest events, back to the first of a non-repeating
    kind (a launch, a start, an end: a new episode), the one with this kind and message."""
    query = (select(Event).where(Event.job_id == job_id).order_by(col(Event.id).desc()).limit(_REPEAT_LOOKBACK))
    for row in tx.exec(query):
        if row.kind not in REPEATING_EVENTS:
            return None
        if row.kind == kind and row.message == message:
            return row
    return None


def _event(tx: Session, kind: EventKind, message: str, job_id: int | None, data: dict[str, Any],
           ts: datetime) -> Event:
    # The event log is read by `orch events`/`status` and kept forever: no credential ever goes in, whatever a
    # provider's error message carried.
    # EventKind(...).value: a kind that is not a member raises; the text is stored, whatever the driver makes of
    # enums.
    row = Event(ts=ts, job_id=job_id, kind=EventKind(kind).value, message=safe_line(message, 4000),
                data=_redacted(data))
    tx.add(row)
    return row


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return safe_line(value, 4000)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    return value


def list_events(tx: Session, *, job_id: int | None = None, after_id: int | None = None,
                kinds: Sequence[str] | None = None, limit: int | None = None) -> list[Event]:
    """Events oldest first; ``after_id`` pages forward (tail -f style)."""
    query = select(Event)
    if job_id is not None:
        query = query.where(Event.job_id == job_id)
    if after_id is not None:
        query = query.where(col(Event.id) > after_id)
    if kinds is not None:
        query = query.where(col(Event.kind).in_(list(kinds)))
    query = query.order_by(col(Event.id))
    if limit is not None:
        query = query.limit(limit)
    return list(tx.exec(query))


def record_spend(tx: Session, job_id: int, from_ts: datetime, to_ts: datetime, usd: float, *,
                 attempt_id: int | None = None) -> Spend:
    if to_ts < from_ts:
        raise ValueError("spend interval ends before it starts")
    if usd < 0:
        raise ValueError("spend cannot be negative")
    row = Spend(job_id=job_id, attempt_id=attempt_id, from_ts=from_ts, to_ts=to_ts, usd=usd)
    tx.add(row)
    tx.flush()
    return row


def total_spend(tx: Session, job_id: int) -> float:
    return float(tx.exec(select(func.coalesce(func.sum(Spend.usd), 0.0)).where(Spend.job_id == job_id)).one())


def last_spend_until(tx: Session, attempt_id: int) -> datetime | None:
    """Up to when an attempt's spend is recorded: the next record should start here."""
    return tx.exec(select(func.max(Spend.to_ts)).where(Spend.attempt_id == attempt_id)).first()
