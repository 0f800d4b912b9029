"""The store's machine rows: what is known of each launched instance (``InstanceRecord``), written one by one or
in bulk each tick, and read by launch id, provider id, job or provider. Like every store operation, each takes
the caller's transaction's Session (orchestrator/store/repo.py)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, case, literal, or_, update
from sqlmodel import Session, col, select

from orchestrator.clock import utcnow
from orchestrator.store.models import GONE_INSTANCE_STATE_VALUES, InstanceRow
from orchestrator.store.pg_arrays import pg_array_literal
from orchestrator.store.row_errors import NotFoundError
from providers.base import InstanceState, Market


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """What is known of one machine. ``None`` fields leave the stored value as it is on update.

    ``state`` and ``market`` are members (TypeError for text): the instances table holds their text, written
    where the record is stored (``record_instance``, ``update_instances``) and typed again where a row is read
    (``InstanceRow.typed_state``, ``InstanceRow.typed_market``)."""

    provider: str
    launch_id: str
    owner: str
    job_id: int | None = None
    instance_id: str | None = None
    instance_type: str | None = None
    region: str | None = None
    zone: str | None = None
    market: Market | None = None
    price_hr: float | None = None
    actual_price_hr: float | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    state: InstanceState | None = None
    raw_state: str | None = None
    public_ip: str | None = None
    ssh_port: int | None = None
    ssh_user: str | None = None
    host_keys: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        # A StrEnum is text too, so text would be stored as it is: refused here, where the caller wrote it.
        if self.state is not None and not isinstance(self.state, InstanceState):
            raise TypeError(f"state must be an InstanceState, not {self.state!r}")
        if self.market is not None and not isinstance(self.market, Market):
            raise TypeError(f"market must be a Market, not {self.market!r}")


_INSTANCE_FIELDS = ("job_id", "instance_id", "instance_type", "region", "zone", "market", "price_hr", "actual_price_hr",
                    "gpu", "gpu_count", "state", "raw_state", "public_ip", "ssh_port", "ssh_user")
_instance_values = operator.attrgetter(*_INSTANCE_FIELDS)     # a record's values of those, in one C call
_MEMBER_FIELDS = frozenset({"market", "state"})                # stored as their members' text


def _given_columns(rec: InstanceRecord) -> list[tuple[str, Any]]:
    """The record's given (not None) fields as the instances table holds them: members as their text."""
    return [(n, v.value if n in _MEMBER_FIELDS else v)
            for n, v in zip(_INSTANCE_FIELDS, _instance_values(rec), strict=True) if v is not None]


def record_instance(tx: Session, rec: InstanceRecord, *, now: datetime | None = None) -> InstanceRow:
    """Insert or update the instance row keyed by ``launch_id`` (idempotent; safe to repeat)."""
    now = now or utcnow()
    row = get_instance_by_launch_id(tx, rec.launch_id)
    if row is None:
        row = InstanceRow(provider=rec.provider, launch_id=rec.launch_id, owner=rec.owner, created_at=now)
    for name, value in _given_columns(rec):
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
        given = _given_columns(rec)
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
    arrays = {f"a_{n}": pg_array_literal([row[f"v_{n}"] for row in last.values()]) for n in columns}
    arrays["a_k"] = pg_array_literal(list(last))
    casts = ", ".join(f"CAST(%(a_{n})s AS {table.c[n].type.compile(dialect=conn.dialect)}[])" for n in columns)
    state = "v.state" if "state" in names else "instances.state"
    gone = ", ".join(f"'{v}'" for v in GONE_INSTANCE_STATE_VALUES)
    sets = ", ".join(f"{n} = v.{n}" for n in columns)
    conn.exec_driver_sql(
        f"UPDATE instances SET {sets}, updated_at = %(now)s, terminated_at = CASE WHEN instances.terminated_at IS "
        f"NULL AND {state} IN ({gone}) THEN %(now)s ELSE instances.terminated_at END "
        f"FROM unnest(CAST(%(a_k)s AS VARCHAR[]), {casts}) AS v(k, {', '.join(columns)}) "
        "WHERE instances.launch_id = v.k", {**arrays, "now": now})




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


def mark_instance_gone(tx: Session, launch_id: str, state: InstanceState = InstanceState.TERMINATED,
                       raw_state: str | None = None, *, now: datetime | None = None) -> InstanceRow:
    """Record the machine of ``launch_id`` gone (``state``: one of ``GONE_INSTANCE_STATES``); its row keeps the
    state's text. NotFoundError for no such row; TypeError for a state given as text, ValueError for one not gone."""
    row = get_instance_by_launch_id(tx, launch_id)
    if row is None:
        raise NotFoundError(f"no instance with launch id {launch_id}")
    if not isinstance(state, InstanceState):
        raise TypeError(f"state must be an InstanceState, not {state!r}")
    if not state.is_gone:
        raise ValueError(f"{state.value!r} is not a gone state ({', '.join(GONE_INSTANCE_STATE_VALUES)})")
    now = now or utcnow()
    row.state = state.value
    if raw_state is not None:
        row.raw_state = raw_state
    row.terminated_at = row.terminated_at or now
    row.updated_at = now
    tx.add(row)
    return row
