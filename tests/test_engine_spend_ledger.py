"""The spend step against the SQL store (SQLite, and PostgreSQL where ORCH_TEST_DATABASE_URL is set): one ledger
row per attempt, UTC day and rate, extended each tick; charged at the cloud's reported price where it reports
one; an UNREACHABLE machine still charged; revision 0006 folds an old per-tick ledger."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text
from sqlmodel import Session, col, select

from orchestrator.app.jobs import apply, load
from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, build_service
from orchestrator.engine.states import EndCause
from orchestrator.engine.values import split_at_midnights
from orchestrator.store import rollup
from orchestrator.store.db import alembic_config, make_engine, upgrade
from orchestrator.store.models import Spend
from orchestrator.store.spend_ledger import SpendCharge, fold, spend_row_count
from orchestrator.store.sqlstore_spend import SPEND_WRITE_EVERY
from providers.base import InstanceState, Market, Offer
from providers.errors import InvalidRequestError
from providers.gpus import Interconnect
from tests._store_db import BACKENDS, database_url_for
from tests.fakes.memory_provider import MemoryProvider
from tests.support.clock import ManualClock as Clock

OFFER = Offer("aws", "p4d.24xlarge", "us-east-1", "use1-az1", "A100-80G", 8, 80, 96, 1152, Interconnect.NVLINK,
              Market.ON_DEMAND, 10.0, date(2026, 12, 1), True)
MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: train
resources: {gpu: A100-80G, count: 8}
market: on-demand
run: {launcher: command, command: nvidia-smi}
"""

# Ticks up to hours apart with no agent reporting: the liveness deadlines are not what these tests are about.
pytestmark = pytest.mark.usefixtures("deadlines_out_of_reach")




@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from database_url_for(request.param, tmp_path)


def engine(url: str, clock: Clock, aws: MemoryProvider) -> Service:
    """The engine on ``url`` (a restart builds it again on the same store)."""
    return build_service(config=OrchConfig(owner="tester"), store_url=url, providers={"aws": aws}, catalog=[OFFER],
                         lease_owner=None, clock=clock)


def service(url: str, tmp_path: Path, clock: Clock, aws: MemoryProvider) -> Service:
    """The engine with the test's job applied."""
    svc = engine(url, clock, aws)
    path = tmp_path / "train.yaml"
    path.write_text(MANIFEST)
    assert svc.store is not None
    apply(svc.store, load([path]), now=clock.now)
    return svc


@contextmanager
def running(url: str, tmp_path: Path, start: datetime) -> Iterator[tuple[Service, Clock, MemoryProvider]]:
    """The engine with the test's job applied, its clock at ``start``, its cloud; closed after."""
    clock = Clock(start)
    aws = MemoryProvider("aws", [OFFER])
    svc = service(url, tmp_path, clock, aws)
    try:
        yield svc, clock, aws
    finally:
        svc.close()


def ledger(svc: Service) -> list[Spend]:
    svc.engine_store.flush()  # type: ignore[attr-defined]
    assert svc.store is not None
    with svc.store.transaction() as tx:
        return list(tx.exec(select(Spend).order_by(col(Spend.from_ts))))


def test_the_ledger_grows_with_attempts_not_ticks(url: str, tmp_path: Path) -> None:
    with running(url, tmp_path, datetime(2026, 12, 1, 12, 0, tzinfo=UTC)) as (svc, clock, _aws):
        svc.reconciler.tick()
        for _ in range(120):                        # an hour of 30 s ticks
            clock.now += timedelta(seconds=30)
            svc.reconciler.tick()
        rows = ledger(svc)
        assert svc.store is not None
        with svc.store.transaction() as tx:
            assert spend_row_count(tx) == len(rows) == 1
            [total] = rollup.spend_between(tx, datetime(2026, 12, 1, tzinfo=UTC), clock.now)
        [row] = rows
        assert (row.day, row.charged_price_hr) == (date(2026, 12, 1), 10.0)
        assert row.to_ts - row.from_ts == timedelta(hours=1)
        assert row.usd == pytest.approx(10.0) and total.usd == pytest.approx(10.0)


def test_a_restarted_engine_extends_the_same_row(url: str, tmp_path: Path) -> None:
    clock = Clock(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    aws = MemoryProvider("aws", [OFFER])
    svc = service(url, tmp_path, clock, aws)
    svc.reconciler.tick()
    clock.now += timedelta(minutes=30)
    svc.reconciler.tick()
    svc.close()
    again = engine(url, clock, aws)
    try:
        clock.now += timedelta(minutes=30)
        again.reconciler.tick()
        [row] = ledger(again)
        assert row.usd == pytest.approx(10.0) and row.to_ts - row.from_ts == timedelta(hours=1)
    finally:
        again.close()


def test_a_charge_across_midnight_makes_one_row_per_day(url: str, tmp_path: Path) -> None:
    with running(url, tmp_path, datetime(2026, 12, 1, 23, 30, tzinfo=UTC)) as (svc, clock, _aws):
        svc.reconciler.tick()
        for _ in range(4):
            clock.now += timedelta(minutes=15)
            svc.reconciler.tick()
        first, second = ledger(svc)
        assert (first.day, first.usd) == (date(2026, 12, 1), pytest.approx(5.0))
        assert (second.day, second.usd) == (date(2026, 12, 2), pytest.approx(5.0))
        assert first.to_ts == second.from_ts == datetime(2026, 12, 2, tzinfo=UTC)
        assert svc.store is not None
        with svc.store.transaction() as tx:
            days = rollup.spend_by_day(tx, datetime(2026, 12, 1, tzinfo=UTC), clock.now)
        assert [(d.day, round(d.usd, 6)) for d in days] == [(date(2026, 12, 1), 5.0), (date(2026, 12, 2), 5.0)]


def test_the_clouds_reported_price_is_charged_and_a_new_price_starts_a_row(url: str, tmp_path: Path) -> None:
    with running(url, tmp_path, datetime(2026, 12, 1, 12, 0, tzinfo=UTC)) as (svc, clock, aws):
        svc.reconciler.tick()
        [inst] = aws.live()
        aws.plant(replace(inst, price_hr=7.5))          # what the cloud says it charges
        clock.now += timedelta(hours=1)
        svc.reconciler.tick()
        aws.plant(replace(inst, price_hr=None))         # a listing without a price: the recorded one stands
        clock.now += timedelta(hours=1)
        svc.reconciler.tick()
        aws.plant(replace(inst, price_hr=8.0))
        clock.now += timedelta(hours=1)
        svc.reconciler.tick()
        rows = ledger(svc)
        assert [(r.charged_price_hr, round(r.usd, 6)) for r in rows] == [(7.5, 15.0), (8.0, 8.0)]
        assert svc.store is not None
        with svc.store.transaction() as tx:
            [burn] = rollup.burn_by_job(tx)
        assert burn.usd_per_hour == 8.0


def test_an_unreachable_machine_is_still_charged(url: str, tmp_path: Path) -> None:
    with running(url, tmp_path, datetime(2026, 12, 1, 12, 0, tzinfo=UTC)) as (svc, clock, aws):
        svc.reconciler.tick()
        [inst] = aws.live()
        clock.now += timedelta(minutes=30)
        svc.reconciler.tick()
        aws.plant(replace(inst, state=InstanceState.UNREACHABLE, raw_state="offline"))
        clock.now += timedelta(minutes=30)
        svc.reconciler.tick()
        [row] = ledger(svc)
        assert row.usd == pytest.approx(10.0)
        assert svc.store is not None
        with svc.store.transaction() as tx:
            [burn] = rollup.burn_by_job(tx)
        assert burn.usd_per_hour == 10.0            # an unreachable machine burns money


def stored(svc: Service) -> list[Spend]:
    """The ledger as another process sees it (nothing flushed first)."""
    assert svc.store is not None
    with svc.store.transaction() as tx:
        return list(tx.exec(select(Spend).order_by(col(Spend.attempt_id), col(Spend.from_ts))))


def test_a_live_attempts_row_is_written_once_per_interval_and_read_exact(url: str, tmp_path: Path) -> None:
    step, start = timedelta(seconds=15), datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    clock = Clock(start)
    aws = MemoryProvider("aws", [OFFER])
    svc = service(url, tmp_path, clock, aws)
    try:
        svc.reconciler.tick()
        written = []
        for _ in range(80):                             # 20 minutes of 15 s ticks
            clock.now += step
            svc.reconciler.tick()
            rows = stored(svc)
            assert len(rows) <= 1
            reached = rows[0].to_ts if rows else start
            assert clock.now - reached <= SPEND_WRITE_EVERY + 2 * step     # the store lags boundedly
            written.append(reached)
        writes = len(set(written))
        assert 20 // 5 - 1 <= writes <= 20 // 5 + 1     # about once per SPEND_WRITE_EVERY, not every tick
        [row] = ledger(svc)                             # this process's read flushes first: exact to the tick
        assert row.to_ts == clock.now and row.usd == pytest.approx(10.0 * 20 / 60)
    finally:
        svc.close()


def test_an_ended_attempts_last_charge_is_written_at_the_next_tick(url: str, tmp_path: Path) -> None:
    with running(url, tmp_path, datetime(2026, 12, 1, 12, 0, tzinfo=UTC)) as (svc, clock, aws):
        svc.reconciler.tick()
        [inst] = aws.live()
        clock.now += timedelta(seconds=15)
        svc.reconciler.tick()
        aws.plant(replace(inst, state=InstanceState.TERMINATED, raw_state="terminated"))  # the machine is lost
        clock.now += timedelta(seconds=15)
        ended = clock.now
        svc.reconciler.tick()                           # ends the attempt and charges it up to now
        clock.now += timedelta(seconds=15)
        svc.reconciler.tick()
        first = [r for r in stored(svc) if r.attempt_id == 1]
        assert [(r.from_ts, r.to_ts) for r in first] == [(ended - timedelta(seconds=30), ended)]
        assert sum(r.usd for r in first) == pytest.approx(10.0 * 30 / 3600)


def test_a_process_killed_with_charges_buffered_loses_no_money(url: str, tmp_path: Path) -> None:
    clock = Clock(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    aws = MemoryProvider("aws", [OFFER])
    svc = service(url, tmp_path, clock, aws)
    svc.reconciler.tick()
    for _ in range(10):
        clock.now += timedelta(seconds=15)
        svc.reconciler.tick()
    assert svc.store is not None
    svc.store.close()                                   # killed: the buffer is never written
    again = engine(url, clock, aws)
    try:
        clock.now += timedelta(seconds=15)
        again.reconciler.tick()
        rows = ledger(again)
        assert sum(r.usd for r in rows) == pytest.approx(10.0 * 165 / 3600)
        assert min(r.from_ts for r in rows) == datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
        assert max(r.to_ts for r in rows) == clock.now
    finally:
        again.close()


def test_split_and_fold() -> None:
    t = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)
    assert list(split_at_midnights(t, t)) == []
    assert list(split_at_midnights(t, t + timedelta(hours=26))) == [
        (t, datetime(2026, 12, 2, tzinfo=UTC)), (datetime(2026, 12, 2, tzinfo=UTC), datetime(2026, 12, 3, tzinfo=UTC)),
        (datetime(2026, 12, 3, tzinfo=UTC), t + timedelta(hours=26))]
    a = SpendCharge(1, 7, t, t + timedelta(minutes=1), 0.1, 6.0)
    b = SpendCharge(1, 7, t + timedelta(minutes=1), t + timedelta(minutes=2), 0.1, 6.0)
    c = SpendCharge(1, 7, t + timedelta(minutes=2), t + timedelta(minutes=3), 0.2, 12.0)
    folded = fold([a, b, c])
    assert [(f.from_ts, f.to_ts, round(f.usd, 6), f.charged_price_hr) for f in folded] == [
        (t, t + timedelta(minutes=2), 0.2, 6.0), (t + timedelta(minutes=2), t + timedelta(minutes=3), 0.2, 12.0)]


@pytest.mark.real_schema_upgrade   # migrates an empty database to 0005 itself, then on
def test_0006_folds_a_per_tick_ledger(url: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "0005")
        t0 = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)

        def stamp(t: datetime) -> datetime:
            return t if engine.dialect.name == "postgresql" else t.replace(tzinfo=None)

        with engine.begin() as conn:
            conn.execute(text("INSERT INTO jobs (id, name, manifest, manifest_hash, desired_state, status, "
                              "applied_at, created_at, updated_at, relaunch_count) VALUES (1, 'j', '{}', 'h', "
                              "'active', 'running', :t, :t, :t, 0)"), {"t": stamp(t0)})
            conn.execute(text("INSERT INTO attempts (id, job_id, generation, node_rank, launch_id, state, created_at, "
                              "updated_at) VALUES (1, 1, 1, 0, 'l000000000001', 'running', :t, :t)"), {"t": stamp(t0)})
            # 150 ticks of 30 s at $6/h: 23:00 -> 00:15, one of them across midnight.
            for i in range(150):
                lo, hi = t0 + timedelta(seconds=30 * i), t0 + timedelta(seconds=30 * (i + 1))
                conn.execute(text("INSERT INTO spend (attempt_id, job_id, from_ts, to_ts, usd) VALUES "
                                  "(1, 1, :lo, :hi, 0.05)"), {"lo": stamp(lo), "hi": stamp(hi)})
            conn.execute(text("INSERT INTO spend (attempt_id, job_id, from_ts, to_ts, usd) VALUES "
                              "(NULL, 1, :lo, :hi, 1.0)"), {"lo": stamp(t0), "hi": stamp(t0)})
        upgrade(engine)
        with Session(engine) as tx:
            rows = list(tx.exec(select(Spend).order_by(col(Spend.from_ts), col(Spend.id))))
            total = sum(r.usd for r in rows)
        assert len(rows) == 3           # the day's 120 ticks folded; the post-midnight 30 kept per day; NULL kept
        day1 = next(r for r in rows if r.day == date(2026, 12, 1))
        day2 = next(r for r in rows if r.day == date(2026, 12, 2))
        assert (round(day1.usd, 6), day1.charged_price_hr, day1.to_ts - day1.from_ts) == (6.0, 6.0, timedelta(hours=1))
        assert (round(day2.usd, 6), day2.charged_price_hr) == (1.5, 6.0)
        assert total == pytest.approx(150 * 0.05 + 1.0)
    finally:
        engine.dispose()


def test_a_catalog_refresh_reaches_the_stores_offers_and_the_planner(tmp_path: Path) -> None:
    """The daemon's refresh swaps ``Reconciler.catalog``: the SQL store rebuilds attempts' offers from the fresh
    rows, the next launch plans on them, and a machine already running is still charged what it was launched at."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    with running(url, tmp_path, datetime(2026, 12, 1, 12, 0, tzinfo=UTC)) as (svc, clock, aws):
        svc.reconciler.tick()
        fresh = replace(OFFER, price_hr=7.0)
        svc.reconciler.catalog = [fresh]
        [live] = svc.engine_store.live_attempts()
        assert live.offer.price_hr == 7.0 and live.launch_price_hr == 10.0
        (tmp_path / "second.yaml").write_text(MANIFEST.replace("name: train", "name: second"))
        assert svc.store is not None
        apply(svc.store, load([tmp_path / "second.yaml"]), now=clock.now)
        clock.now += timedelta(hours=1)
        svc.reconciler.tick()
        rows = ledger(svc)
        assert [(r.attempt_id, r.charged_price_hr, round(r.usd, 6)) for r in rows] == [(1, 10.0, 10.0)]
        launched = [i for i in aws.live() if i.job == "second"]
        assert [i.price_hr for i in launched] == [7.0]      # planned on the refreshed row


def test_a_machine_left_running_after_its_attempt_ended_is_still_charged(url: str, tmp_path: Path) -> None:
    """The job's own budget ends its attempt (TERMINATED at once) while the cloud refuses the terminate for an
    hour: the machine bills on, listed running, until the sweep's terminate goes through. That hour is charged
    to the job (the ledger says what the cloud bills), not lost because the attempt had ended."""
    clock = Clock(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    aws = MemoryProvider("aws", [OFFER])
    svc = engine(url, clock, aws)
    path = tmp_path / "train.yaml"
    path.write_text(MANIFEST + "policies: {budget_usd: 15}\n")
    assert svc.store is not None
    apply(svc.store, load([path]), now=clock.now)
    try:
        svc.reconciler.tick()
        [inst] = aws.live()
        aws.fail("terminate", *[InvalidRequestError("refused", provider="aws")] * 100)
        for _ in range(6):                              # $15 spent at 1.5 h: the budget ends the attempt
            clock.now += timedelta(minutes=15)
            svc.reconciler.tick()
        [attempt] = svc.engine_store.attempts_for_job(1)
        assert attempt.end_cause is EndCause.BUDGET_STOP and attempt.state.is_final
        assert [i.instance_id for i in aws.live()] == [inst.instance_id]       # the terminate was refused
        for _ in range(2):                              # the sweep asks again each tick: refused
            clock.now += timedelta(minutes=20)
            svc.reconciler.tick()
        assert len(aws.live()) == 1
        aws.cloud.fail_next["terminate"].clear()        # an hour after the stop, the cloud takes the terminate
        clock.now += timedelta(minutes=20)
        svc.reconciler.tick()
        assert aws.live() == []
        assert sum(r.usd for r in ledger(svc)) == pytest.approx(10.0 * (1.5 + 1.0))
    finally:
        svc.close()
