"""The spend ledger rolled up (orchestrator.store.rollup) and the budgets read against it
(orchestrator.store.budget_watch), on SQLite and (with ORCH_TEST_DATABASE_URL) PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.alerts.model import Alert, AlertKind
from orchestrator.alerts.redact import WebhookUrl
from orchestrator.config.alerts import AlertSettings, UrlSource, Webhook
from orchestrator.daemon.alerts import attach_alerts
from orchestrator.engine.events import EventKind
from orchestrator.money.budgets import Budget, BudgetMatch, JobFacts, ThresholdKey
from orchestrator.store import repo, rollup
from orchestrator.store.budget_watch import read_ledger, review_budgets, standings
from orchestrator.store.db import Store, open_store
from orchestrator.store.models import Attempt, InstanceRow, Job
from tests._store_db import BACKENDS, database_url_for, open_test_store
from tests._webhook_receiver import start_receiver

JULY_1 = datetime(2025, 7, 1, tzinfo=UTC)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from open_test_store(request.param, tmp_path)


def add_job(store: Store, name: str, project: str | None = None) -> int:
    manifest: dict[str, object] = {"apiVersion": "orch/v1", "kind": "Job", "name": name}
    if project:
        manifest["project"] = project
    with store.transaction() as tx:
        job = Job(name=name, manifest=manifest, manifest_hash=name, created_at=JULY_1, updated_at=JULY_1,
                  applied_at=JULY_1)
        tx.add(job)
        tx.flush()
        assert job.id is not None
        return job.id


def add_attempt(store: Store, job_id: int, launch_id: str, *, state: str = "running", inst_state: str = "running",
                price: float = 2.0, actual: float | None = None, market: str = "spot",
                instance_id: str | None = "i-1") -> int:
    with store.transaction() as tx:
        a = Attempt(job_id=job_id, launch_id=launch_id, state=state, created_at=JULY_1, updated_at=JULY_1)
        tx.add(a)
        tx.add(InstanceRow(provider="aws", launch_id=launch_id, owner="t", job_id=job_id, instance_id=instance_id,
                           state=inst_state, price_hr=price, actual_price_hr=actual, market=market,
                           created_at=JULY_1, updated_at=JULY_1))
        tx.flush()
        assert a.id is not None
        return a.id


def spend(store: Store, job_id: int, attempt_id: int | None, start: datetime, hours: float, usd: float) -> None:
    with store.transaction() as tx:
        repo.record_spend(tx, job_id, start, start + timedelta(hours=hours), usd, attempt_id=attempt_id)


# -- the rollup -----------------------------------------------------------------------------------------------

def test_spend_between_prorates_rows_that_straddle_the_window(store: Store) -> None:
    a, b = add_job(store, "a"), add_job(store, "b")
    att = add_attempt(store, a, "la")
    spend(store, a, att, JULY_1 - timedelta(hours=1), 2, 20.0)       # half of it in July
    spend(store, a, att, JULY_1 + timedelta(days=3), 1, 7.0)
    spend(store, b, None, JULY_1 + timedelta(days=40), 1, 99.0)      # August
    with store.transaction() as tx:
        july = rollup.spend_between(tx, JULY_1, datetime(2025, 8, 1, tzinfo=UTC))
        only_b = rollup.spend_between(tx, JULY_1, datetime(2025, 9, 1, tzinfo=UTC), job_ids=[b])
    assert [(s.job_id, s.usd) for s in july] == [(a, pytest.approx(17.0))]
    assert [(s.job_id, s.usd) for s in only_b] == [(b, pytest.approx(99.0))]


def test_spend_by_day_splits_a_row_across_utc_midnight(store: Store) -> None:
    a = add_job(store, "a")
    spend(store, a, None, datetime(2025, 7, 1, 22, tzinfo=UTC), 4, 8.0)    # 2 h on the 1st, 2 h on the 2nd
    spend(store, a, None, datetime(2025, 7, 2, 5, tzinfo=UTC), 1, 1.5)
    with store.transaction() as tx:
        days = rollup.spend_by_day(tx, JULY_1, datetime(2025, 7, 3, tzinfo=UTC))
        clipped = rollup.spend_by_day(tx, datetime(2025, 7, 1, 23, tzinfo=UTC), datetime(2025, 7, 2, 1, tzinfo=UTC))
    assert [(d.day, d.usd) for d in days] == [(date(2025, 7, 1), pytest.approx(4.0)),
                                              (date(2025, 7, 2), pytest.approx(5.5))]
    assert [(d.day, d.usd) for d in clipped] == [(date(2025, 7, 1), pytest.approx(2.0)),
                                                 (date(2025, 7, 2), pytest.approx(2.0))]


def test_spend_by_attempt_sums_each_attempt_over_its_span(store: Store) -> None:
    a = add_job(store, "a")
    first, second = add_attempt(store, a, "l1"), add_attempt(store, a, "l2")
    for i in range(3):
        spend(store, a, first, JULY_1 + timedelta(minutes=i), 1 / 60, 0.5)
    spend(store, a, second, JULY_1 + timedelta(hours=1), 1, 3.0)
    with store.transaction() as tx:
        rows = rollup.spend_by_attempt(tx, job_id=a)
    assert [(r.attempt_id, r.usd, r.since, r.until) for r in rows] == [
        (first, pytest.approx(1.5), JULY_1, JULY_1 + timedelta(minutes=3)),
        (second, pytest.approx(3.0), JULY_1 + timedelta(hours=1), JULY_1 + timedelta(hours=2))]


def test_burn_counts_billing_machines_at_their_charged_price(store: Store) -> None:
    a, b = add_job(store, "a"), add_job(store, "b")
    add_attempt(store, a, "l1", price=2.0, actual=1.5)                               # the cloud's price wins
    add_attempt(store, a, "l2", price=4.0, market="on-demand")
    add_attempt(store, a, "l3", price=9.0, inst_state="terminated", state="terminated")
    add_attempt(store, b, "l4", price=5.0, instance_id=None, state="failed")       # never a machine
    with store.transaction() as tx:
        burn = rollup.burn_by_job(tx)
        labels = rollup.job_labels(tx, [a])
    assert [(x.job_id, x.usd_per_hour, x.spot_usd_per_hour) for x in burn] == [(a, 5.5, 1.5)]
    assert [(x.name, x.project) for x in labels] == [("a", None)]


# -- budgets against the store --------------------------------------------------------------------------------

def test_the_ledger_holds_this_months_spend_burn_and_projects(store: Store) -> None:
    nlp, other = add_job(store, "nlp-1", "nlp"), add_job(store, "other")
    add_attempt(store, nlp, "l1", price=3.0)
    spend(store, nlp, None, JULY_1 - timedelta(days=1), 1, 50.0)     # June: not this month
    spend(store, nlp, None, JULY_1 + timedelta(days=1), 1, 12.0)
    spend(store, other, None, JULY_1 + timedelta(days=2), 1, 5.0)
    now = JULY_1 + timedelta(days=10)
    with store.transaction() as tx:
        ledger = read_ledger(tx, now)
    # owner: the orch owner of the job's newest machine (none for a job that never had one)
    assert sorted(ledger.jobs, key=lambda j: j.name) == [JobFacts(nlp, "nlp-1", "nlp", 12.0, 3.0, "t"),
                                                         JobFacts(other, "other", None, 5.0, 0.0, None)]
    assert ledger.alerted == frozenset() and ledger.now == now


def test_a_crossed_threshold_is_recorded_once_per_month_and_alerts_one_receiver_once(store: Store) -> None:
    receiver = start_receiver()
    try:
        nlp = add_job(store, "nlp-1", "nlp")
        budget = Budget("nlp", BudgetMatch(frozenset({"nlp"})), monthly_usd=100.0, alert_at=(0.5, 0.8))
        settings = AlertSettings((Webhook("r", UrlSource(url=WebhookUrl(f"{receiver.base}/h"))),), timeout_s=30)
        dispatcher = attach_alerts(store, settings)
        assert dispatcher is not None
        spend(store, nlp, None, JULY_1, 1, 40.0)
        assert review_budgets(store, [budget], JULY_1 + timedelta(days=1)).crossings == ()
        spend(store, nlp, None, JULY_1 + timedelta(days=2), 1, 15.0)          # 55 of 100: past 50%
        first = review_budgets(store, [budget], JULY_1 + timedelta(days=3))
        again = review_budgets(store, [budget], JULY_1 + timedelta(days=4))
        assert [c.threshold for c in first.crossings] == [0.5] and again.crossings == ()
        # FIFO: once this marker is in, any second threshold alert would have arrived before it
        dispatcher.submit(Alert(AlertKind.JOB_FAILED, "marker", None, "marker", JULY_1))
        assert receiver.wait_for(lambda r: len(r.received) == 2)
        kinds = [r.body["kind"] for r in receiver.received]
        assert kinds == ["budget-threshold", "job-failed"]
        assert receiver.received[0].body["message"] == \
            "budget nlp: $55.00 of $100.00 spent in 2025-07 (55%), past its 50% alert"
        with store.transaction() as tx:
            events = rollup.events_since(tx, EventKind.BUDGET_THRESHOLD, JULY_1)
            assert read_ledger(tx, JULY_1 + timedelta(days=5)).alerted == {ThresholdKey("nlp", 0.5)}
        assert len(events) == 1 and events[0].data["month"] == "2025-07"
        # a new month starts afresh: August spend crosses 50% again and alerts again
        august = datetime(2025, 8, 1, tzinfo=UTC)
        spend(store, nlp, None, august, 1, 60.0)
        assert [c.threshold for c in review_budgets(store, [budget], august + timedelta(hours=2)).crossings] \
            == [0.5]
    finally:
        receiver.close()


def test_standings_record_nothing(store: Store) -> None:
    a = add_job(store, "a")
    spend(store, a, None, JULY_1, 1, 90.0)
    result = standings(store, [Budget("all", monthly_usd=100.0, alert_at=(0.5,))], JULY_1 + timedelta(days=1))
    assert [c.threshold for c in result.crossings] == [0.5]
    with store.transaction() as tx:
        assert rollup.events_since(tx, EventKind.BUDGET_THRESHOLD, JULY_1) == ()


def test_upsert_spend_creates_and_extends_rows_per_attempt_day_and_rate(store: Store) -> None:
    # PostgreSQL writes the buffer as one statement over column arrays; SQLite one execution per row: same rows.
    from sqlalchemy.exc import StatementError
    from sqlmodel import select

    from orchestrator.store.models import Spend
    from orchestrator.store.spend_ledger import SpendCharge, upsert_spend

    job = add_job(store, "ledger")
    a, b = add_attempt(store, job, "l-a"), add_attempt(store, job, "l-b", instance_id="i-2")
    t = JULY_1 + timedelta(hours=23)
    half = timedelta(minutes=30)
    with store.transaction() as tx:
        upsert_spend(tx, [SpendCharge(job, a, t, t + half, 1.0, 2.0), SpendCharge(job, b, t, t + half, 1.5, 3.0)])
    with store.transaction() as tx:     # extends a's and b's rows; a new rate and a new day start rows
        upsert_spend(tx, [SpendCharge(job, a, t + half, t + 2 * half, 1.0, 2.0),
                          SpendCharge(job, b, t + half, t + 2 * half, 0.5, 1.0),
                          SpendCharge(job, a, t + 2 * half, t + 3 * half, 1.0, 2.0)])
    with store.transaction() as tx:
        rows = sorted((r.attempt_id, r.day, r.charged_price_hr, r.from_ts, r.to_ts, r.usd)
                      for r in tx.exec(select(Spend)))
    day1, day2 = (t.date(), (t + 2 * half).date())
    assert rows == sorted([(a, day1, 2.0, t, t + 2 * half, 2.0), (a, day2, 2.0, t + 2 * half, t + 3 * half, 1.0),
                           (b, day1, 3.0, t, t + half, 1.5), (b, day1, 1.0, t + half, t + 2 * half, 0.5)])
    with pytest.raises((ValueError, StatementError)), store.transaction() as tx:     # naive time: refused
        upsert_spend(tx, [SpendCharge(job, a, t.replace(tzinfo=None), t + half, 1.0, 2.0)])


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from database_url_for("postgresql", tmp_path)


@pytest.mark.postgres
def test_two_daemons_reviewing_at_once_alert_a_threshold_once(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Daemon A has read the ledger (no alert yet) and not committed when daemon B reviews: B must wait for
    A's commit and then see A's event, not write a second one (READ COMMITTED alone lets both write)."""
    import threading
    import time

    from sqlalchemy import text

    from orchestrator.store import budget_watch

    store_a, store_b = open_store(pg_url), open_store(pg_url)
    try:
        spend(store_a, add_job(store_a, "a"), None, JULY_1, 1, 90.0)
        budget = Budget("all", monthly_usd=100.0, alert_at=(0.5,))
        a_read, a_go = threading.Event(), threading.Event()
        real_read = budget_watch.read_ledger

        def read_then_hold(tx, now):  # type: ignore[no-untyped-def]
            ledger = real_read(tx, now)
            if threading.current_thread().name == "daemon-a":
                a_read.set()
                assert a_go.wait(60), "the test never let daemon A go on"
            return ledger

        monkeypatch.setattr(budget_watch, "read_ledger", read_then_hold)
        results: dict[str, int] = {}

        def run(name: str, s: Store) -> None:
            results[name] = len(review_budgets(s, [budget], JULY_1 + timedelta(days=1)).crossings)

        a = threading.Thread(target=run, args=("a", store_a), name="daemon-a")
        b = threading.Thread(target=run, args=("b", store_b), name="daemon-b")
        a.start()
        assert a_read.wait(60)
        b.start()
        # wait (on events, not a time window) until B either finished or waits on the review lock
        deadline = time.monotonic() + 60
        while b.is_alive() and time.monotonic() < deadline:
            with store_a.engine.connect() as conn:
                if conn.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                     "AND NOT granted")).scalar():
                    break
            time.sleep(0.01)
        a_go.set()
        a.join(60)
        b.join(60)
        assert results == {"a": 1, "b": 0}
        with store_a.transaction() as tx:
            assert len(rollup.events_since(tx, EventKind.BUDGET_THRESHOLD, JULY_1)) == 1
    finally:
        store_a.close()
        store_b.close()
