"""A new SQLite store in a test starts as a copy of one migrated at the start of the worker's session.

Every test that opens a store on a new SQLite file paid the whole migration chain (a dozen alembic scripts,
their DDL: ~0.1 s of CPU) in ``open_store``; a third of the suite's tests do, several times some. Here the
chain runs once per pytest worker, through ``orchestrator.store.db.upgrade`` itself, into a template file;
``_ensure_schema`` then finds a new store's file still empty (``make_engine`` creates it 0600 and empty),
writes the template's bytes into it, draws the store's own id again (migration 0008 draws one per store),
and checks it as always (its revision is the head, so nothing more runs). The migrations themselves stay
tested: the template is made by them, tests/test_migrations.py and tests/test_store.py opt out
(``pytest.mark.real_schema_upgrade``), and every orch run as its own process (crash matrices, CLI smoke
tests, daemons) upgrades its new store for real.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine


def make_template(path: Path) -> bytes:
    """The bytes of a SQLite store migrated to the head by orch's own upgrade."""
    from orchestrator.store.db import make_engine, upgrade

    engine = make_engine(f"sqlite:///{path}")
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return path.read_bytes()


def install(monkeypatch: pytest.MonkeyPatch, template: Callable[[], bytes]) -> None:
    """For this test: a new (empty) SQLite store's file gets ``template()``'s bytes before its schema check."""
    import orchestrator.store.db as db

    real = db._ensure_schema

    def from_template(engine: Engine) -> None:
        database = engine.url.database if engine.dialect.name == "sqlite" else None
        if database and database != ":memory:":
            path = Path(database).expanduser()
            if path.exists() and path.stat().st_size == 0:
                with path.open("r+b") as f:          # the file make_engine created (its mode kept)
                    f.write(template())
                draw_again(engine)
        real(engine)

    monkeypatch.setattr(db, "_ensure_schema", from_template)


def draw_again(engine: Engine) -> None:
    """What the migrations draw per store is drawn again for the copy: the store's id (migration 0008), which
    every launch id carries; two stores must not share it."""
    import secrets

    from sqlalchemy import update

    from orchestrator.clock import utcnow
    from orchestrator.store.models import StoreIdentityRow

    with engine.begin() as conn:
        conn.execute(update(StoreIdentityRow).values(store_id=secrets.token_hex(4), created_at=utcnow()))
