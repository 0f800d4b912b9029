"""A pooled PostgreSQL connection is pinged before use only after it sat idle (orchestrator/store/db.py
``_ping_when_idle``): a connection the server dropped meanwhile is still replaced before a transaction uses
it, and a tick's back-to-back transactions pay no ping each. ORCH_TEST_DATABASE_URL; skipped without it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text

import orchestrator.store.db as db
from orchestrator.store.db import Store, open_store
from tests._store_db import pg_database

pytestmark = pytest.mark.postgres


@pytest.fixture
def url() -> Iterator[str]:
    yield from pg_database()


def _pings(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    real = store.engine.dialect.do_ping

    def counting(dbapi: Any) -> bool:
        seen.append(1)
        return bool(real(dbapi))

    monkeypatch.setattr(store.engine.dialect, "do_ping", counting)
    return seen


def _backend(store: Store) -> int:
    with store.transaction() as tx:
        return int(tx.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


def test_back_to_back_transactions_are_not_pinged_and_idle_ones_are(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(url)
    try:
        pings = _pings(store, monkeypatch)
        for _ in range(5):
            _backend(store)
        assert pings == []                          # used within the last second each time
        monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.0)     # as if every checkout came after a sleep
        for _ in range(3):
            _backend(store)
        assert len(pings) == 3
    finally:
        store.close()


def test_a_connection_the_server_dropped_while_idle_is_replaced_before_use(url: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(url)
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        first = _backend(store)
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": first})   # waits for it
        monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.0)     # it sat idle (a daemon between ticks)
        assert _backend(store) != first             # no error: the ping found it gone, the pool reconnected
    finally:
        admin.dispose()
        store.close()
