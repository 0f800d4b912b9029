"""What a steady fleet tick costs in round trips (PostgreSQL; ORCH_TEST_DATABASE_URL, skipped without it): each
daemon of a fleet pays it every tick, so a fleet of K pays it K times a round (docs/daemon.md, 2026-12-07 run 2).
The wait for lapsed registrations is its own transaction only while some other registration may have lapsed,
and the kept reads' token and the open relaunch requests are checked against the counts the claim read; a
relaunch request and a stop from another process, and a lapsed daemon's jobs, are still seen at the next tick."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import event

from orchestrator.app.down import mark_down
from orchestrator.daemon.assembly import Service
from orchestrator.store.requests import request_relaunch
from tests._store_db import pg_database
from tests.support.steady_fleet import steady_fleet

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("deadlines_out_of_reach")]


@pytest.fixture
def url() -> Iterator[str]:
    yield from pg_database()


def _watch(svc: Service) -> tuple[list[str], list[int]]:
    """The statements the service's store sends from now on, and how many transactions it commits."""
    assert svc.store is not None
    statements: list[str] = []
    commits = [0]

    def before(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        statements.append(" ".join(statement.split()))

    def commit(conn) -> None:  # type: ignore[no-untyped-def]
        commits[0] += 1

    event.listen(svc.store.engine, "before_cursor_execute", before)
    event.listen(svc.store.engine, "commit", commit)
    return statements, commits


def test_a_steady_fleet_tick_waits_on_no_reap_and_reads_no_requests(url: str, tmp_path: Path) -> None:
    with steady_fleet(url, tmp_path) as fleet:
        clock, aws, services, store = fleet.clock, fleet.aws, fleet.services, fleet.store
        watched = [_watch(svc) for svc in services]
        for svc in services:
            report = svc.reconciler.tick()
            assert report.quiet and not report.errors
        for statements, commits in watched:
            assert not [s for s in statements if s.startswith("SET LOCAL lock_timeout = '5000ms'")]   # no wait
            assert not [s for s in statements if "FOR UPDATE" in s and "FROM daemons" in s]    # nor any reap
            assert len([s for s in statements if "FROM store_changes" in s]) == 2   # the claim's, the sweep's
            assert not [s for s in statements if "FROM job_requests" in s]     # kept under the counts
            assert commits[0] <= 4 and len(statements) <= 8, statements   # 6-7 and 10-13 before
        # A relaunch request from another process (the console) is seen at the next tick: its job's machine
        # ends and another starts.
        before = {i.job: i.instance_id for i in aws.live()}
        with store.transaction() as tx:
            request_relaunch(tx, "two", now=clock.now)
        clock.now += timedelta(seconds=15)
        for svc in services:
            svc.reconciler.tick()
        after = {i.job: i.instance_id for i in aws.live()}
        assert after["two"] != before["two"] and after["three"] == before["three"]
        # A stop from another process is seen at the next tick.
        mark_down(store, ["one"], now=clock.now)
        clock.now += timedelta(seconds=15)
        for svc in services:
            svc.reconciler.tick()
        assert sorted(i.job or "" for i in aws.live()) == ["four", "three", "two"]
        # d2 stops ticking: d1's ticks wait on no reap while d2's registration is live, and at the first tick
        # after it lapsed (the TTL, 90 s) d1 waits on the reap and takes d2's jobs.
        lapsing = services[1].engine_store.fleet.holding  # type: ignore[attr-defined]
        assert lapsing is not None and lapsing.jobs
        for _ in range(5):
            clock.now += timedelta(seconds=15)
            watched[0][0].clear()
            services[0].reconciler.tick()
            assert not [s for s in watched[0][0] if s.startswith("SET LOCAL lock_timeout = '5000ms'")]
        clock.now += timedelta(seconds=20)
        watched[0][0].clear()
        services[0].reconciler.tick()
        assert [s for s in watched[0][0] if s.startswith("SET LOCAL lock_timeout = '5000ms'")]
        holding = services[0].engine_store.fleet.holding  # type: ignore[attr-defined]
        assert holding is not None and holding.live_daemons == 1 and set(lapsing.jobs) <= set(holding.jobs)
