"""Databases for the store tests: a SQLite file always; a fresh PostgreSQL database per test where
ORCH_TEST_DATABASE_URL is set (created and dropped here, uniquely named)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from orchestrator.store.db import Store

PG_ENV = "ORCH_TEST_DATABASE_URL"
PG_SKIP_REASON = f"{PG_ENV} is not set (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/postgres)"
# Set by scripts/test.sh when it found or started the server: from then on an unusable server is a failure.
PG_REQUIRE_ENV = "ORCH_TEST_REQUIRE_POSTGRES"
# Set by scripts/test.sh when it could not have a server: why the PostgreSQL tests skip.
PG_WHY_ENV = "ORCH_TEST_POSTGRES_SKIP"

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def pg_database(template: str | None = None) -> Iterator[str]:
    """Create a uniquely named database on the server of ORCH_TEST_DATABASE_URL; yield its URL; drop it.
    ``template``: the name of a database (no session on it) the new one is a copy of; else an empty one.

    No URL, or a server that does not answer: the test skips, saying why, unless ORCH_TEST_REQUIRE_POSTGRES=1
    (scripts/test.sh found or started that server), where an unusable server fails the test."""
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(os.environ.get(PG_WHY_ENV) or PG_SKIP_REASON)
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"orch_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    except Exception as exc:
        admin.dispose()
        why = f"{PG_ENV} is set but PostgreSQL is not usable: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        if os.environ.get(PG_REQUIRE_ENV) == "1":
            pytest.fail(why)
        pytest.skip(why)
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


def open_test_store(backend: str, tmp_path: Path) -> Iterator[Store]:
    """The per-backend `store` fixtures' body: an opened store on `backend`'s database, closed after the test."""
    from orchestrator.store.db import open_store

    for url in database_url_for(backend, tmp_path):
        s = open_store(url)
        try:
            yield s
        finally:
            s.close()
