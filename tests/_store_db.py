"""Databases for the store tests: a SQLite file always; a fresh PostgreSQL database per test where
ORCH_TEST_DATABASE_URL is set (created and dropped here, uniquely named).

A store fixture's new PostgreSQL database (``database_url_for``, ``open_test_store``) is a copy of one migrated
once per pytest worker (``CREATE DATABASE ... TEMPLATE``), as a new SQLite store is a copy of a migrated file
(tests/support/schema_template.py): tests/conftest.py sets ``pg_template`` for each test, except those marked
``real_schema_upgrade``, whose new databases are empty and migrated by ``open_store``. ``pg_database()`` (the
``pg_url`` fixture: daemons racing on a new database) always gives an empty one."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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

#: Set per test by tests/conftest.py (``migrated_pg_template``): the name of this worker's PostgreSQL database
#: at the schema's head, made on first call; None: a store fixture's new database is empty.
pg_template: Callable[[], str] | None = None


def pg_database(template: str | None = None) -> Iterator[str]:
    """Create a uniquely named database on the server of ORCH_TEST_DATABASE_URL (its sessions commit without
    waiting for the disk: ``synchronous_commit`` off); yield its URL; drop it.
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
            # A commit returns before its WAL is flushed to disk (~3 ms of fsync each on the project's machines):
            # what the tests read is the same (a commit is visible to every session at once either way); only
            # a crash of the PostgreSQL server itself could lose the last commits, and no test crashes it.
            conn.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit TO off'))
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


def migrated_pg_template() -> Iterator[Callable[[], str]]:
    """For a session fixture: a callable giving the name of a database that orch's own ``open_store`` migrated
    to the head, made on its first call (a test that needs it: skips or fails as ``pg_database`` says when
    no server is usable), dropped after the session. No session is left on it: it is a template."""
    from sqlalchemy.engine import make_url

    from orchestrator.store.db import open_store

    made: list[str] = []
    with ExitStack() as stack:

        def name() -> str:
            if not made:
                url = stack.enter_context(contextmanager(pg_database)())
                open_store(url).close()
                made.append(str(make_url(url).database))
            return made[0]

        yield name


def pg_store_database(template: str) -> Iterator[str]:
    """``pg_database(template)``, with what the migrations draw per store drawn again for the copy (its store id,
    which every launch id carries: two stores must not share it)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from tests.support.schema_template import draw_again

    for url in pg_database(template):
        engine = create_engine(url, poolclass=NullPool)
        try:
            draw_again(engine)
        finally:
            engine.dispose()
        yield url


def database_url_for(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'store' / 'orch.db'}"
    elif pg_template is None:
        yield from pg_database()
    else:
        yield from pg_store_database(pg_template())


def open_test_store(backend: str, tmp_path: Path) -> Iterator[Store]:
    """The per-backend `store` fixtures' body: an opened store on `backend`'s database, closed after the test."""
    from orchestrator.store.db import open_store

    for url in database_url_for(backend, tmp_path):
        s = open_store(url)
        try:
            yield s
        finally:
            s.close()
