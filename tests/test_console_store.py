"""The console's store functions: GPU utilization per minute, relaunch requests, stop, and the console's reads.
On SQLite, and on PostgreSQL where ORCH_TEST_DATABASE_URL is set."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from orchestrator.engine.events import EventKind
from orchestrator.engine.states import DesiredState, JobStatus
from orchestrator.engine.values import GpuUtilSample
from orchestrator.manifest.schema import MarketChoice
from orchestrator.store import console_queries as q
from orchestrator.store import repo
from orchestrator.store import spend_series as sp
from orchestrator.store.console_values import EventFilter
from orchestrator.store.db import Store, open_store
from orchestrator.store.gpu_util import record_gpu_util, util_since
from orchestrator.store.models import Event, GpuUtilMinute
from orchestrator.store.repo import InstanceRecord
from orchestrator.store.requests import (
    RequestRefusedError,
    open_relaunch_request,
    request_relaunch,
    request_stop,
    take_relaunch_requests,
)
from providers.base import InstanceState, Market
from tests._store_db import BACKENDS, open_test_store
from tests.support import console_world
from tests.support.manifests import store_unchecked_job

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
HOUR = timedelta(hours=1)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from open_test_store(request.param, tmp_path)


def _job(store: Store, name: str, manifest: dict[str, object] | None = None) -> int:
    with store.transaction() as tx:
        job = store_unchecked_job(tx, name, manifest or {"name": name}, f"h-{name}", now=T0)
        assert job.id is not None
        return job.id


def _attempt(store: Store, job_id: int, launch_id: str, *, provider: str = "aws", generation: int = 1,
             node_rank: int = 0, instance_id: str | None = "i-1", state: InstanceState = InstanceState.RUNNING,
             price: float = 2.0, actual: float | None = None) -> int:
    with store.transaction() as tx:
        a = repo.create_attempt(tx, job_id, launch_id, generation=generation, node_rank=node_rank, now=T0)
        repo.record_instance(tx, InstanceRecord(provider=provider, launch_id=launch_id, owner="t", job_id=job_id,
                                                instance_id=instance_id, instance_type="x1", region="r1",
                                                market=Market.SPOT, price_hr=price, actual_price_hr=actual,
                                                state=state), now=T0)
        assert a.id is not None
        return a.id


# -- GPU utilization -----------------------------------------------------------------------------------

def test_record_gpu_util_folds_readings_into_minutes(store: Store) -> None:
    job = _job(store, "a")
    att = _attempt(store, job, "L1")
    with store.transaction() as tx:
        record_gpu_util(tx, [
            GpuUtilSample(att, job, T0 + timedelta(seconds=5), (80.0, 100.0)),     # mean 90, max 100
            GpuUtilSample(att, job, T0 + timedelta(seconds=50), (60.0, 70.0)),     # mean 65, max 70
            GpuUtilSample(att, job, T0 + MIN + timedelta(seconds=1), (float("nan"), 250.0)),  # clamped: 0, 100
            GpuUtilSample(att, job, T0 + 2 * MIN, ()),                               # no reading: skipped
        ])
    with store.transaction() as tx:
        rows = util_since(tx, [att], T0)
    assert [(r.minute, r.samples, r.mean_pct, r.max_pct) for r in rows] == [
        (T0, 2, pytest.approx(77.5), 100.0), (T0 + MIN, 1, pytest.approx(50.0), 100.0)]
    # A later tick in the same minute folds into the stored row (a running mean over all its samples).
    with store.transaction() as tx:
        record_gpu_util(tx, [GpuUtilSample(att, job, T0 + timedelta(seconds=55), (10.0,))])
    with store.transaction() as tx:
        first = util_since(tx, [att], T0)[0]
    assert (first.samples, first.mean_pct, first.max_pct) == (3, pytest.approx((90 + 65 + 10) / 3), 100.0)
    assert all(math.isfinite(r.mean_pct) for r in rows)


def test_record_gpu_util_prunes_rows_past_the_retention(store: Store) -> None:
    job = _job(store, "a")
    att = _attempt(store, job, "L1")
    with store.transaction() as tx:
        record_gpu_util(tx, [GpuUtilSample(att, job, T0 + i * MIN, (50.0,)) for i in range(5)])
    with store.transaction() as tx:
        pruned = record_gpu_util(tx, [GpuUtilSample(att, job, T0 + 10 * MIN, (50.0,))], retention=7 * MIN)
    assert pruned == 3   # minutes 0, 1 and 2 are older than 10 - 7
    with store.transaction() as tx:
        minutes = [r.minute for r in tx.exec(select(GpuUtilMinute).order_by(GpuUtilMinute.minute))]
    assert minutes == [T0 + 3 * MIN, T0 + 4 * MIN, T0 + 10 * MIN]


def test_util_since_reads_only_the_asked_attempts_and_window(store: Store) -> None:
    job = _job(store, "a")
    one, two = _attempt(store, job, "L1"), _attempt(store, job, "L2", instance_id="i-2")
    with store.transaction() as tx:
        record_gpu_util(tx, [GpuUtilSample(a, job, T0 + i * MIN, (10.0 * a,)) for a in (one, two) for i in range(3)])
    with store.transaction() as tx:
        got = util_since(tx, [two], T0 + MIN + timedelta(seconds=30))
    assert [(r.attempt_id, r.minute) for r in got] == [(two, T0 + MIN), (two, T0 + 2 * MIN)]


# -- requests ------------------------------------------------------------------------------------------

def test_relaunch_requests_are_taken_once_oldest_first(store: Store) -> None:
    a, b = _job(store, "a"), _job(store, "b")
    with store.transaction() as tx:
        rb = request_relaunch(tx, "b", now=T0)
        ra = request_relaunch(tx, "a", now=T0 + MIN)
        again = request_relaunch(tx, "b", now=T0 + 2 * MIN)   # still open: the same request
    assert again.id == rb.id and again.requested_at == T0
    with store.transaction() as tx:
        assert open_relaunch_request(tx, b) is not None
        kinds = [e.kind for e in tx.exec(select(Event).where(Event.kind == "job.relaunch-requested"))]
    assert kinds == ["job.relaunch-requested"] * 2
    with store.transaction() as tx:
        taken = take_relaunch_requests(tx, now=T0 + 3 * MIN)
    assert [(r.job_name, r.job_id, r.taken_at) for r in taken] == [("b", b, T0 + 3 * MIN), ("a", a, T0 + 3 * MIN)]
    assert ra.id != rb.id
    with store.transaction() as tx:
        assert take_relaunch_requests(tx, now=T0 + 4 * MIN) == []
        assert open_relaunch_request(tx, b) is None
    # Once taken, asking again opens a new request.
    with store.transaction() as tx:
        assert request_relaunch(tx, "b", now=T0 + 5 * MIN).id != rb.id


def test_take_relaunch_requests_only_for_the_given_jobs(store: Store) -> None:
    a, b = _job(store, "a"), _job(store, "b")
    with store.transaction() as tx:
        request_relaunch(tx, "a", now=T0)
        request_relaunch(tx, "b", now=T0)
    with store.transaction() as tx:
        assert take_relaunch_requests(tx, now=T0, job_ids=[]) == []
        assert [r.job_id for r in take_relaunch_requests(tx, now=T0, job_ids=[b])] == [b]
    with store.transaction() as tx:
        assert [r.job_id for r in take_relaunch_requests(tx, now=T0)] == [a]


def test_a_request_taken_in_a_rolled_back_transaction_stays_open(store: Store) -> None:
    _job(store, "a")
    with store.transaction() as tx:
        request_relaunch(tx, "a", now=T0)
    with pytest.raises(RuntimeError), store.transaction() as tx:
        assert len(take_relaunch_requests(tx, now=T0)) == 1
        raise RuntimeError("the engine's tick failed before acting")
    with store.transaction() as tx:
        assert len(take_relaunch_requests(tx, now=T0)) == 1


def test_relaunch_is_refused_for_unknown_and_torn_down_jobs(store: Store) -> None:
    _job(store, "a")
    with store.transaction() as tx:
        repo.set_desired_state(tx, "a", DesiredState.DELETED, now=T0)
    with pytest.raises(RequestRefusedError, match="deleted"), store.transaction() as tx:
        request_relaunch(tx, "a", now=T0)
    with pytest.raises(repo.NotFoundError), store.transaction() as tx:
        request_relaunch(tx, "nope", now=T0)


def test_stop_marks_the_job_deleted_as_orch_down_does(store: Store) -> None:
    job = _job(store, "a")
    with store.transaction() as tx:
        request_stop(tx, "a", now=T0)
        request_stop(tx, "a", now=T0 + MIN)   # again: nothing more written
    with store.transaction() as tx:
        row = repo.get_job(tx, "a")
        assert row is not None and row.desired_state == DesiredState.DELETED.value
        kinds = [e.kind for e in repo.list_events(tx, job_id=job)]
    assert kinds.count("job.deleted") == 1 and kinds.count("job.stop-requested") == 1
    with pytest.raises(repo.NotFoundError), store.transaction() as tx:
        request_stop(tx, "nope")


# -- spend over time -----------------------------------------------------------------------------------

def _spend(store: Store, job: int, attempt: int | None, start: datetime, end: datetime, usd: float) -> None:
    with store.transaction() as tx:
        repo.record_spend(tx, job, start, end, usd, attempt_id=attempt)


def test_spend_series_is_the_same_for_tick_rows_and_rolled_up_rows(store: Store) -> None:
    fine, coarse = _job(store, "fine"), _job(store, "coarse")
    fa = _attempt(store, fine, "F1", provider="gcp")
    ca = _attempt(store, coarse, "C1", provider="runpod", instance_id="i-2")
    # The same $4/h over 10:30-14:30: as 15-second tick rows, and as one rolled-up row.
    start, end = T0 - 90 * MIN, T0 + 150 * MIN
    t = start
    while t < end:
        _spend(store, fine, fa, t, t + timedelta(seconds=15), 4.0 / 240)
        t += timedelta(seconds=15)
    _spend(store, coarse, ca, start, end, 16.0)
    with store.transaction() as tx:
        s = sp.spend_series(tx, since=T0 - 3 * HOUR, until=T0 + 3 * HOUR, step=HOUR)
    assert s.starts[0] == T0 - 3 * HOUR and len(s.starts) == 6
    by = {x.name: x.values for x in s.by_job}
    expected = [0.0, 2.0, 4.0, 4.0, 4.0, 2.0]   # 09:00 to 15:00; 10:30-11:00 is half an hour, 14:00-14:30 too
    assert by["fine"] == pytest.approx(expected)
    assert by["coarse"] == pytest.approx(expected)
    providers = {x.name: x.total for x in s.by_provider}
    assert providers == pytest.approx({"gcp": 16.0, "runpod": 16.0})


def test_spend_series_cuts_rows_at_the_range_and_counts_unknown_providers(store: Store) -> None:
    job = _job(store, "a")
    _spend(store, job, None, T0 - 2 * HOUR, T0 + 2 * HOUR, 8.0)    # half of it inside [T0, T0 + 4h)
    _spend(store, job, None, T0 + HOUR, T0 + HOUR, 1.0)            # an instant
    _spend(store, job, None, T0 + 5 * HOUR, T0 + 6 * HOUR, 9.0)    # after the range
    with store.transaction() as tx:
        s = sp.spend_series(tx, since=T0, until=T0 + 4 * HOUR, step=HOUR)
    assert s.by_job[0].values == pytest.approx((2.0, 3.0, 0.0, 0.0))
    assert [p.name for p in s.by_provider] == [sp.UNKNOWN_PROVIDER]
    assert s.total == pytest.approx(5.0)


def test_bucket_starts_fall_on_round_utc_times() -> None:
    starts = sp.bucket_starts(T0 + 17 * MIN, T0 + 3 * HOUR, HOUR)
    assert starts == (T0, T0 + HOUR, T0 + 2 * HOUR)
    days = sp.bucket_starts(T0, T0 + timedelta(days=2), timedelta(days=1))
    assert days[0] == datetime(2026, 3, 1, tzinfo=UTC)
    with pytest.raises(ValueError):
        sp.bucket_starts(T0, T0 + HOUR, timedelta(0))


# -- the fleet, budgets, events, one job ---------------------------------------------------------------

def test_fleet_lists_live_machines_prices_and_util(store: Store) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    world = console_world.fill(store, now)
    with store.transaction() as tx:
        fleet = q.fleet(tx, now=now)
    jobs = {j.name: j for j in fleet.jobs}
    assert set(jobs) == {"llama-ft", "bert-pretrain", "eval-sweep", "ablation-7"}
    llama = jobs[world.running_job]
    assert llama.status is JobStatus.RUNNING and llama.relaunches == 1 and llama.budget_usd == 60.0
    [node] = llama.nodes          # the preempted generation 1 is gone
    assert (node.provider, node.generation, node.market, node.instance_id) == ("gcp", 2, "spot", "orch-llama-ft-7f3a")
    assert node.price_now_hr == 2.05 and node.actual_hr is None
    assert 55 <= len(node.util) <= 61 and all(p.minute >= now - HOUR - MIN for p in node.util)
    assert min(p.mean_pct for p in node.util) < 60 < max(p.mean_pct for p in node.util)   # the dip shows
    bert = jobs["bert-pretrain"]
    assert [n.node_rank for n in bert.nodes] == [0, 1]
    assert [n.price_now_hr for n in bert.nodes] == [23.92, 24.1]       # actual prices beside the quote
    assert bert.burn_hr == pytest.approx(48.02) and fleet.burn_hr == pytest.approx(48.02 + 2.05)
    assert jobs["eval-sweep"].nodes == () and jobs["eval-sweep"].spent_usd == pytest.approx(4.23)
    assert llama.last_event is not None and llama.last_event.kind == "checkpoint"


def test_fleet_keeps_a_torn_down_job_until_its_machines_are_gone(store: Store) -> None:
    job = _job(store, "gone")
    _job(store, "forgotten")
    _attempt(store, job, "G1")
    with store.transaction() as tx:
        request_stop(tx, "gone", now=T0)
        request_stop(tx, "forgotten", now=T0)
    with store.transaction() as tx:
        names = [(j.name, j.desired) for j in q.fleet(tx, now=T0).jobs]
    assert names == [("gone", DesiredState.DELETED)]
    with store.transaction() as tx:
        repo.mark_instance_gone(tx, "G1", now=T0)
    with store.transaction() as tx:
        assert q.fleet(tx, now=T0).jobs == ()


def test_job_budgets_come_from_the_manifests(store: Store) -> None:
    _job(store, "capped", {"name": "capped", "policies": {"budget_usd": 10}})
    _job(store, "free", {"name": "free", "policies": {"budget_usd": "lots"}})   # not a number: no budget
    with store.transaction() as tx:
        budgets = {b.job: b.budget_usd for b in q.job_budgets(tx)}
    assert budgets == {"capped": 10.0, "free": None}


def test_event_page_filters_and_pages_newest_first(store: Store) -> None:
    a, b = _job(store, "a"), _job(store, "b")
    with store.transaction() as tx:
        for i in range(7):
            repo.record_event(tx, EventKind.STARTED if i % 2 else EventKind.APPLY, f"a{i}", job_id=a, ts=T0 + i * MIN)
        repo.record_event(tx, EventKind.APPLY, "b0", job_id=b, ts=T0)
    with store.transaction() as tx:
        page1 = q.event_page(tx, EventFilter(job="a"), page=1, per_page=3)
        page3 = q.event_page(tx, EventFilter(job="a"), page=3, per_page=3)
        beyond = q.event_page(tx, EventFilter(job="a"), page=99, per_page=3)
        ticks = q.event_page(tx, EventFilter(kinds=(EventKind.STARTED,)), per_page=10)
        window = q.event_page(tx, EventFilter(job="a", since=T0 + 2 * MIN, until=T0 + 4 * MIN), per_page=10)
        none = q.event_page(tx, EventFilter(job="nope"), per_page=10)
        kinds, names = q.event_kinds(tx), q.job_names(tx)
    created = 1   # upsert_job's job.created event
    assert page1.total == 7 + created and page1.pages == 3
    assert [e.message for e in page1.rows] == ["a6", "a5", "a4"]
    assert [e.message for e in page3.rows] == ["a0", "job a created"]   # same time: the later id first
    assert beyond.page == 3
    assert [e.message for e in ticks.rows] == ["a5", "a3", "a1"] and {e.job for e in ticks.rows} == {"a"}
    assert [e.message for e in window.rows] == ["a3", "a2"]
    assert none.total == 0 and none.rows == ()
    assert {EventKind.STARTED, EventKind.APPLY, EventKind.JOB_CREATED} <= set(kinds) and names == ["a", "b"]


def test_job_detail_holds_attempts_checkpoints_and_the_open_request(store: Store) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    console_world.fill(store, now)
    with store.transaction() as tx:
        request_relaunch(tx, "llama-ft", now=now)
    with store.transaction() as tx:
        d = q.job_detail(tx, "llama-ft", event_limit=5)
        assert q.job_detail(tx, "nope") is None
    assert d is not None
    assert [(a.generation, a.provider, a.state.value) for a in d.attempts] == [(1, "aws", "preempted"),
                                                                             (2, "gcp", "running")]
    assert [c.step for c in d.checkpoints] == [1000, 2000, 3000]
    assert len(d.events) == 5 and d.events_total > 5 and d.events[0].kind == "job.relaunch-requested"
    assert d.open_relaunch is not None and d.open_relaunch.requested_at == now
    assert d.gpu == "1x A100-80G" and d.budget_usd == 60.0 and d.spent_usd > 0
    assert d.market is MarketChoice.SPOT, "the manifest's market, typed where the store reads it"


@pytest.mark.postgres
def test_two_daemons_taking_at_once_split_the_requests(tmp_path: Path) -> None:
    """PostgreSQL: a request one daemon is taking (locked, not committed) is skipped by another, not taken twice."""
    from tests._store_db import pg_database

    for url in pg_database():
        s = open_store(url)
        try:
            _job(s, "a")
            _job(s, "b")
            with s.transaction() as tx:
                request_relaunch(tx, "a", now=T0)
                request_relaunch(tx, "b", now=T0 + MIN)
            with s.transaction() as first:
                mine = take_relaunch_requests(first, now=T0, job_ids=None)
                with s.transaction() as second:
                    theirs = take_relaunch_requests(second, now=T0)
            assert [r.job_name for r in mine] == ["a", "b"] and theirs == []
        finally:
            s.close()
