"""Databases for the store tests: a SQLite file always; a fresh PostgreSQL database per test where
ORCH_TEST_DATABASE_URL is set (created and dropped here, uniquely named)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ENV = "ORCH_TEST_DATABASE_URL"
PG_SKIP_REASON = f"{PG_ENV} is not set (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/postgres)"

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def pg_database() -> Iterator[str]:
    """Create a uniquely named database on the server of ORCH_TEST_DATABASE_URL; yield its URL; drop it."""
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(PG_SKIP_REASON)
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"orch_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        admin.dispose()
        pytest.fail(f"{PG_ENV} is set but PostgreSQL is not usable: {exc}")
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def database_url_for(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'store' / 'orch.db'}"
    else:
        yield from pg_database()
