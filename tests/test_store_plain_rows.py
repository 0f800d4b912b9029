"""``plain_rows`` gives the rows the ORM path gives, value for value, timestamps in ``datetime.UTC`` (SQLite and
PostgreSQL): the engine's hot reads (orchestrator/store/queries.py) go through it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import col, select

from orchestrator.store import queries, repo
from orchestrator.store.db import Store
from orchestrator.store.models import Attempt, Job
from orchestrator.store.plain_rows import plain_rows
from providers.base import InstanceState
from tests._store_db import BACKENDS, open_test_store

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from open_test_store(request.param, tmp_path)


def _seed(store: Store) -> None:
    with store.transaction() as tx:
        for i in range(3):
            tx.add(Job(id=i + 1, name=f"job-{i}", manifest={"name": f"job-{i}", "x": [1, "two"]},
                       manifest_hash=f"h{i}", desired_state="active", status="running", applied_at=T0,
                       created_at=T0, updated_at=T0, lease_owner="me" if i else None))
        tx.flush()
        for i in range(3):
            repo.record_instance(tx, repo.InstanceRecord(provider="lambda", launch_id=f"l{i}", owner="o", job_id=i + 1,
                                                         instance_type="gpu_1x", state=InstanceState.RUNNING,
                                                         price_hr=1.29, actual_price_hr=None if i else 0.1 + 0.2),
                                 now=T0)
            tx.add(Attempt(id=i + 1, job_id=i + 1, generation=1, node_rank=0, launch_id=f"l{i}", state="running",
                           started_at=T0 + timedelta(seconds=i), created_at=T0, updated_at=T0,
                           drain_until=None if i else T0 + timedelta(hours=1)))


def test_plain_rows_are_the_orm_rows(store: Store) -> None:
    _seed(store)
    with store.transaction() as tx:
        for q in (select(Job.id, Job.name, Job.applied_at, Job.created_at).order_by(col(Job.id)),
                  select(Attempt.id, Attempt.started_at, Attempt.drain_until, Attempt.ended_at)
                  .where(col(Attempt.state).in_(["running", "launched"])).order_by(col(Attempt.id))):
            plain, orm = [tuple(r) for r in plain_rows(tx, q)], [tuple(r) for r in tx.exec(q).all()]
            assert plain == orm and len(plain) == 3
            for got, want in zip(plain, orm, strict=True):
                assert [type(v) for v in got] == [type(v) for v in want]
                assert all(v.tzinfo is UTC for v in got if isinstance(v, datetime))
        attempts = queries.live_attempt_columns(tx, "me")
        assert [a.id for a in attempts] == [2, 3] and attempts[0].actual_price_hr is None
        assert all(a.started_at.tzinfo is UTC and a.created_at.tzinfo is UTC for a in attempts)
        texts = queries.manifest_texts(tx, [1, 2, 3])
        assert [t.id for t in texts] == [1, 2, 3] and all(t.applied_at.tzinfo is UTC for t in texts)
        assert queries.spend_totals(tx, [1, 2, 3]) == {1: 0.0, 2: 0.0, 3: 0.0}
        assert queries.spend_marks(tx, [1, 2]) == {1: None, 2: None}
        assert queries.spend_totals(tx, []) == {} and queries.manifest_texts(tx, []) == []
        rows = queries.unended_instance_columns(tx, "lambda")
        assert sorted(r.actual_price_hr or 0 for r in rows) == [0, 0, 0.1 + 0.2]
