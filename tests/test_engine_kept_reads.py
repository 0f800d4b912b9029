"""The SQL engine store keeps its reads of jobs and attempts across steady ticks (SQLite: until another connection
commits, ``PRAGMA data_version``), and still sees what another process writes at its next tick."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event

from orchestrator.app.down import mark_down
from orchestrator.app.jobs import apply, load
from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, build_service
from orchestrator.store import change_tokens
from orchestrator.store.db import open_store
from providers.base import Market, Offer
from providers.gpus import Interconnect
from tests.fakes.memory_provider import MemoryProvider
from tests.support.clock import ManualClock as Clock

OFFER = Offer("aws", "p4d.24xlarge", "us-east-1", "use1-az1", "A100-80G", 8, 80, 96, 1152, Interconnect.NVLINK,
              Market.ON_DEMAND, 10.0, date(2026, 12, 1), True)
MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: {name}
resources: {{gpu: A100-80G, count: 8}}
market: on-demand
run: {{launcher: command, command: nvidia-smi}}
"""

pytestmark = pytest.mark.usefixtures("deadlines_out_of_reach")




@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Service, Clock, MemoryProvider, str]]:
    url = f"sqlite:///{tmp_path}/orch.db"
    clock = Clock(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    aws = MemoryProvider("aws", [OFFER])
    svc = build_service(config=OrchConfig(owner="tester"), store_url=url, providers={"aws": aws}, catalog=[OFFER],
                        lease_owner=None, clock=clock)
    paths = []
    for name in ("one", "two"):
        paths.append(tmp_path / f"{name}.yaml")
        paths[-1].write_text(MANIFEST.format(name=name))
    assert svc.store is not None
    apply(svc.store, load(paths), now=clock.now)
    try:
        yield svc, clock, aws, url
    finally:
        svc.close()


def selects(svc: Service) -> list[str]:
    """The SELECTs the service's store runs from now on (the list fills as they run)."""
    assert svc.store is not None
    seen: list[str] = []

    def before(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append(statement)

    event.listen(svc.store.engine, "before_cursor_execute", before)
    return seen


def run_ticks(svc: Service, clock: Clock, count: int) -> None:
    """``count`` reconciler ticks, 15 s of the fake clock apart (the jobs launch and run in the first few)."""
    for _ in range(count):
        svc.reconciler.tick()
        clock.now += timedelta(seconds=15)


def test_a_steady_tick_reads_no_job_or_attempt_again(world: tuple[Service, Clock, MemoryProvider, str]) -> None:
    svc, clock, aws, _ = world
    run_ticks(svc, clock, 3)                            # launch both, see them run
    assert len(aws.live()) == 2
    seen = selects(svc)
    svc.reconciler.tick()
    assert svc.reconciler.tick().quiet
    reads = [s for s in seen if "FROM jobs" in s or "FROM attempts" in s]
    assert seen and reads == []     # the draining attempts too are kept (nothing wrote them)


def test_what_another_process_writes_is_read_at_the_next_tick(world: tuple[Service, Clock, MemoryProvider,
                                                                             str]) -> None:
    svc, clock, aws, url = world
    run_ticks(svc, clock, 3)
    svc.reconciler.tick()                               # the reads are kept from here on
    assert sorted(i.job or "" for i in aws.live()) == ["one", "two"]
    other = open_store(url)                             # `orch down one` from another process
    try:
        mark_down(other, ["one"], now=clock.now)
    finally:
        other.close()
    clock.now += timedelta(seconds=15)
    svc.reconciler.tick()                               # asks the cloud to end one's machine
    assert [i.job for i in aws.live()] == ["two"]


def test_the_change_token_moves_when_another_connection_commits(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/orch.db"
    mine, other = open_store(url), open_store(url)
    path = tmp_path / "one.yaml"
    path.write_text(MANIFEST.format(name="one"))
    try:
        with mine.transaction() as tx:
            first = change_tokens.change_token(tx)
        with mine.transaction() as tx:
            assert change_tokens.change_token(tx) == first    # nobody wrote: the same token
        apply(other, load([path]), now=datetime(2026, 12, 1, tzinfo=UTC))
        with mine.transaction() as tx:
            assert change_tokens.change_token(tx) != first
    finally:
        mine.close()
        other.close()


def test_the_kept_attempts_are_as_a_fresh_read_after_the_cloud_reports_a_price(
        world: tuple[Service, Clock, MemoryProvider, str]) -> None:
    from dataclasses import replace

    from orchestrator.store.sqlstore import SqlEngineStore

    svc, clock, aws, _ = world
    run_ticks(svc, clock, 3)
    one, two = sorted(aws.live(), key=lambda i: i.instance_id)
    aws.plant(replace(one, price_hr=7.5))               # the instance row records it (an instance-only write)
    aws.plant(replace(two, price_hr=None))              # no price: the recorded one stands
    svc.reconciler.tick()
    store = svc.engine_store
    assert isinstance(store, SqlEngineStore) and svc.store is not None
    seen = selects(svc)
    kept = list(store.live_attempts())
    assert not [s for s in seen if "FROM attempts" in s]     # kept, patched as written: not read again
    fresh = SqlEngineStore(svc.store, "tester", catalog=[OFFER])
    assert kept == list(fresh.live_attempts())
    assert sorted(a.actual_price_hr for a in kept) == [7.5, 10.0]


@pytest.mark.postgres
def test_a_fleet_daemon_keeps_its_jobs_until_their_rows_change(tmp_path: Path) -> None:
    from tests._store_db import pg_database

    for url in pg_database():
        clock = Clock(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
        aws = MemoryProvider("aws", [OFFER])
        svc = build_service(config=OrchConfig(owner="tester"), store_url=url, providers={"aws": aws},
                            catalog=[OFFER], lease_owner="d1", clock=clock)
        try:
            paths = []
            for name in ("one", "two"):
                paths.append(tmp_path / f"{name}.yaml")
                paths[-1].write_text(MANIFEST.format(name=name))
            assert svc.store is not None
            apply(svc.store, load(paths), now=clock.now)
            svc.engine_store.join(clock.now)  # type: ignore[attr-defined]
            run_ticks(svc, clock, 4)
            assert sorted(i.job or "" for i in aws.live()) == ["one", "two"]
            seen = selects(svc)
            svc.reconciler.tick()
            assert seen and not [s for s in seen if "jobs.manifest_hash" in s]     # the jobs are not read again
            mark_down(svc.store, ["one"], now=clock.now)                       # `orch down one`
            clock.now += timedelta(seconds=15)
            svc.reconciler.tick()
            assert [i.job for i in aws.live()] == ["two"]
        finally:
            svc.close()


def test_the_kept_draining_attempts_are_narrowed_to_the_time_asked_and_read_again_for_an_earlier_one(
        world: tuple[Service, Clock, MemoryProvider, str]) -> None:
    from sqlalchemy import update

    from orchestrator.store.models import Attempt
    from orchestrator.store.sqlstore import SqlEngineStore

    svc, clock, _, url = world
    run_ticks(svc, clock, 3)
    other = open_store(url)
    try:
        with other.transaction() as tx:       # another process marks one attempt draining for a minute
            tx.execute(update(Attempt).where(Attempt.id == 1).values(drain_until=clock.now + timedelta(minutes=1)))
    finally:
        other.close()
    store = svc.engine_store
    assert isinstance(store, SqlEngineStore)
    store.keep_unchanged_reads()            # as a tick begins: another connection committed
    assert [a.id for a in store.draining_attempts(clock.now)] == [1]
    seen = selects(svc)
    assert [a.id for a in store.draining_attempts(clock.now + timedelta(seconds=30))] == [1]
    assert store.draining_attempts(clock.now + timedelta(minutes=2)) == []    # its drain is over
    assert not [s for s in seen if "FROM attempts" in s]                      # kept: not read again
    assert [a.id for a in store.draining_attempts(clock.now - timedelta(seconds=1))] == [1]
    assert [s for s in seen if "attempts.drain_until >" in s]                 # earlier than the read: read again
