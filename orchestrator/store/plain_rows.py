"""A hot read's rows as the driver hands them out: no ORM loading, no per-value result processors.

At 10k jobs a restart reads the held jobs, their manifests and their 10k live attempts with their instance rows.
Through the ORM each value passed SQLAlchemy's row processing, and each timestamp ``UTCDateTime``'s
conversion (``astimezone(UTC)`` on an already-UTC value): ~15% of a first tick's CPU. On PostgreSQL, with the
session's time zone UTC (``orchestrator.store.db`` sets it), psycopg already hands out timestamps in
``datetime.UTC``, the values ``UTCDateTime`` would give: the statement is compiled by SQLAlchemy as usual and
run as driver SQL, whose rows carry no processors. Elsewhere (SQLite, a session in another zone) the rows
come the usual way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from typing import Any

from sqlmodel import Session


def plain_rows(tx: Session, q: Any) -> Sequence[Sequence[Any]]:
    """The rows of the select ``q`` in ``tx``'s transaction, equal to ``tx.exec(q).all()``'s."""
    conn = tx.connection()
    if conn.dialect.name == "postgresql":
        raw = conn.connection.dbapi_connection
        if raw is not None and getattr(getattr(raw, "info", None), "timezone", None) is UTC:
            compiled = q.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
            return conn.exec_driver_sql(str(compiled), compiled.params).all()
    return tx.exec(q).all()
