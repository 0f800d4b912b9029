"""Change tokens: whether anybody wrote since a read, so the SQL engine store may keep its reads
(orchestrator/store/sqlstore_reads.py). Two equal tokens: nobody wrote what the token covers. SQLite's covers
the whole database; PostgreSQL's a lease owner's job rows (``change_token``) or every daemon's live attempts
(``live_attempts_token``). Each takes the Session of the caller's transaction."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sqlmodel import Session

from orchestrator.store.queries import LIVE_ATTEMPT_STATE_VALUES

__all__ = ["ChangeToken", "HeldJobRows", "SqliteChanges", "change_token", "live_attempts_token"]

_serials = itertools.count(1)


@dataclass(frozen=True, slots=True)
class SqliteChanges:
    """SQLite's change token: one connection (a serial kept in its pool record: an ``id()`` could name a later
    one), its ``PRAGMA data_version`` (moves when another connection commits, any process's) and its
    ``total_changes`` (moves when this connection writes, whoever in this process uses it). Covers the whole
    database."""

    connection: int
    data_version: int
    total_changes: int


@dataclass(frozen=True, slots=True)
class HeldJobRows:
    """PostgreSQL's change token for one lease owner: how many job rows it holds and a digest of each one's id
    and ``xmin`` (the transaction that wrote its current version: any update gives a row a new one). Covers
    those job rows only (the same data stays the same token, row locks included)."""

    count: int
    digest: str


ChangeToken = SqliteChanges | HeldJobRows


def change_token(tx: Session, lease_owner: str | None = None) -> ChangeToken | None:
    """Whether anybody wrote since: two equal tokens, nobody did (in what the token covers). None: unknown.

    SQLite: ``SqliteChanges``. PostgreSQL, with ``lease_owner``: ``HeldJobRows``; without one: None."""
    conn = tx.connection()
    if conn.dialect.name != "sqlite":
        if lease_owner is None:
            return None
        found = conn.exec_driver_sql(
            "SELECT count(*), md5(coalesce(string_agg(id::text || ':' || xmin::text, ',' ORDER BY id), '')) "
            "FROM jobs WHERE lease_owner = %(owner)s", {"owner": lease_owner}).one()
        return HeldJobRows(int(found[0]), str(found[1]))
    record = conn.connection
    serial = record.info.setdefault("orch_serial", next(_serials))
    version = conn.exec_driver_sql("PRAGMA data_version").scalar_one()
    return SqliteChanges(int(serial), int(version), int(record.dbapi_connection.total_changes))  # type: ignore[union-attr]


def live_attempts_token(tx: Session) -> HeldJobRows:
    """PostgreSQL: a digest of every live attempt row's id and ``xmin``, any daemon's. Equal tokens: no live
    attempt was added, changed or ended in between, so a kept ``live_launch_ids`` still holds (one row comes
    back instead of every launch id). Unordered (every daemon computes it each tick, and sorting the fleet's live
    attempts was half its server time): an equal text is the same rows, and rows read in another order only
    make the caller read the ids again."""
    found = tx.connection().exec_driver_sql(
        "SELECT count(*), md5(coalesce(string_agg(id::text || ':' || xmin::text, ','), '')) "
        "FROM attempts WHERE state = ANY(%(live)s)", {"live": list(LIVE_ATTEMPT_STATE_VALUES)}).one()
    return HeldJobRows(int(found[0]), str(found[1]))
