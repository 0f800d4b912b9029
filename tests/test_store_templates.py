"""The test suite's new stores are copies of one migrated per worker (tests/support/schema_template.py for SQLite,
tests/_store_db.py's ``CREATE DATABASE ... TEMPLATE`` for PostgreSQL): each copy is at the head and has a store id
of its own, as a store that ran the migrations itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.store.db import current_revision, head_revision
from orchestrator.store.identity import store_id
from tests._store_db import BACKENDS, open_test_store


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_new_store_is_at_the_head_with_a_store_id_of_its_own(backend: str, tmp_path: Path) -> None:
    ids = []
    for n in range(3):
        for store in open_test_store(backend, tmp_path / f"s{n}"):
            assert current_revision(store.engine) == head_revision()
            ids.append(store_id(store))
    assert len(set(ids)) == 3, ids
