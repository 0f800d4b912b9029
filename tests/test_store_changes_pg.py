"""The server counts the transactions that wrote jobs and attempts (migration 0012, orchestrator/store/changes.py),
so a steady fleet tick reads that one row instead of digesting the fleet's rows; a write anybody commits is
still seen at the next tick. PostgreSQL only (ORCH_TEST_DATABASE_URL; skipped without it)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event, update

from orchestrator.app.down import mark_down
from orchestrator.app.jobs import apply, load
from orchestrator.daemon.assembly import Service
from orchestrator.store.changes import BOTH, Counted, counts
from orchestrator.store.db import Store, open_store
from orchestrator.store.models import Attempt, Job
from orchestrator.store.requests import request_relaunch
from tests._store_db import pg_database
from tests.support.steady_fleet import steady_fleet
from tests.test_engine_kept_reads import MANIFEST

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("deadlines_out_of_reach")]


@pytest.fixture
def url() -> Iterator[str]:
    yield from pg_database()


def _counts(store: Store) -> tuple[int, int]:
    """The jobs' and the attempts' counts."""
    with store.transaction() as tx:
        found = counts(tx)
    assert found is not None
    return found[0], found[1]


def test_each_committed_writer_moves_its_tables_count_once_and_a_rolled_back_one_none(url: str,
                                                                                      tmp_path: Path) -> None:
    store = open_store(url)
    try:
        for name in ("one", "two", "three"):
            (tmp_path / f"{name}.yaml").write_text(MANIFEST.format(name=name))
        start = _counts(store)
        apply(store, load(sorted(tmp_path.glob("*.yaml"))), now=datetime(2026, 12, 1, tzinfo=UTC))
        jobs, attempts = _counts(store)
        assert jobs > start[0] and attempts == start[1]
        with store.transaction() as tx:        # three rows, twice over: one writer
            tx.execute(update(Job).values(relaunch_count=Job.relaunch_count + 1))
            tx.execute(update(Job).values(relaunch_count=Job.relaunch_count + 1))
        assert _counts(store) == (jobs + 1, attempts)
        with pytest.raises(RuntimeError), store.transaction() as tx:
            tx.execute(update(Job).values(relaunch_count=0))
            raise RuntimeError("rolled back")
        assert _counts(store) == (jobs + 1, attempts)
        with store.transaction() as tx:        # no attempt row matches: nothing written, nothing counted
            tx.execute(update(Attempt).where(Attempt.id == -1).values(node_rank=1))
        assert _counts(store) == (jobs + 1, attempts)
        with store.transaction() as tx:
            before = counts(tx)
        with store.transaction() as tx:        # a relaunch request (the console's): job_requests' count (0013)
            request_relaunch(tx, "one", now=datetime(2026, 12, 1, tzinfo=UTC))
        with store.transaction() as tx:
            after = counts(tx)
        assert before is not None and after == (before[0], before[1], before[2] + 1)
    finally:
        store.close()


def test_a_kept_answer_holds_until_a_count_it_depends_on_moves(url: str) -> None:
    store = open_store(url)
    try:
        counted, answers = Counted(), iter(range(100))
        with store.transaction() as tx:
            first = counted.get(tx, "x", BOTH, lambda: next(answers))
        with store.transaction() as tx:
            assert counted.get(tx, "x", BOTH, lambda: next(answers)) == first
        with store.transaction() as tx:
            tx.execute(update(Job).values(relaunch_count=1))    # no job row: no writer counted
        with store.transaction() as tx:
            assert counted.get(tx, "x", BOTH, lambda: next(answers)) == first
        with store.transaction() as tx:
            tx.connection().exec_driver_sql("TRUNCATE attempts CASCADE")
        with store.transaction() as tx:
            assert counted.get(tx, "x", BOTH, lambda: next(answers)) == first + 1
        assert counted.computed == 2
    finally:
        store.close()


def _digests(svc: Service) -> list[str]:
    """The fleet-wide digests (``string_agg`` over jobs or attempts) the service's store runs from now on."""
    assert svc.store is not None
    seen: list[str] = []

    def before(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if "string_agg" in statement:
            seen.append(statement)

    event.listen(svc.store.engine, "before_cursor_execute", before)
    return seen


def test_a_steady_fleet_tick_digests_no_rows_and_still_sees_the_next_write(url: str, tmp_path: Path) -> None:
    with steady_fleet(url, tmp_path) as fleet:
        seen = [_digests(svc) for svc in fleet.services]
        for svc in fleet.services:
            report = svc.reconciler.tick()
            assert report.quiet and not report.errors
        assert seen == [[], []]           # steady: each daemon read the counts' row, digested nothing
        mark_down(fleet.store, ["one"], now=fleet.clock.now)    # another connection writes a job (`orch down one`)
        fleet.clock.now += timedelta(seconds=15)
        for svc in fleet.services:
            svc.reconciler.tick()
        assert all(any("FROM jobs" in s for s in digests) for digests in seen)   # the counts moved: digested
        assert sorted(i.job or "" for i in fleet.aws.live()) == ["four", "three", "two"]
