"""The spend step's charge of an interval is the one the UTC-midnight cut gives (orchestrator/engine/spend.py
``accrue``: one charge without the cut inside a UTC day), and a restart reads every live attempt's spend mark
in one pass (orchestrator/store/sqlstore_spend.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from orchestrator.engine.spend import SpendStep, _Charged
from orchestrator.engine.values import split_at_midnights
from orchestrator.money.spend import accrued_usd

MIDNIGHT = datetime(2026, 12, 2, tzinfo=UTC)


class Recording:
    def __init__(self) -> None:
        self.charges: list[tuple[Any, ...]] = []

    def add_spend(self, job_id: int, attempt_id: int, usd: float, since: datetime, until: datetime, *,
                  price_hr: float) -> None:
        self.charges.append((job_id, attempt_id, usd, since, until, price_hr))


def test_each_interval_is_charged_as_the_midnight_cut_charges_it() -> None:
    east = timezone(timedelta(hours=5))
    intervals = [(MIDNIGHT - timedelta(hours=2), MIDNIGHT - timedelta(minutes=1)),      # inside a day
                 (MIDNIGHT - timedelta(hours=1), MIDNIGHT),                              # up to midnight
                 (MIDNIGHT, MIDNIGHT + timedelta(seconds=15)),                           # from midnight
                 (MIDNIGHT - timedelta(minutes=1), MIDNIGHT + timedelta(minutes=1)),     # across it
                 (MIDNIGHT - timedelta(days=2, hours=1), MIDNIGHT + timedelta(hours=1)),  # across three
                 ((MIDNIGHT - timedelta(hours=1)).astimezone(east), MIDNIGHT + timedelta(hours=1)),  # not UTC
                 (MIDNIGHT - timedelta(hours=1), (MIDNIGHT - timedelta(minutes=1)).astimezone(east)),
                 (MIDNIGHT, MIDNIGHT), (MIDNIGHT, MIDNIGHT - timedelta(seconds=1))]   # empty, inverted
    for since, until in intervals:
        store = Recording()
        total = SpendStep().accrue(store, _Charged(7, 3), 2.5, since, until)     # type: ignore[arg-type]
        want = [(3, 7, accrued_usd(2.5, lo, hi), lo, hi, 2.5) for lo, hi in split_at_midnights(since, until)
                if accrued_usd(2.5, lo, hi) > 0]
        assert store.charges == want, (since, until)
        assert total == sum(c[2] for c in want)


def test_a_restart_reads_every_live_attempts_mark_in_one_pass(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.engine.states import AttemptState
    from orchestrator.store import queries
    from orchestrator.store.db import open_store
    from orchestrator.store.sqlstore import SqlEngineStore
    from tests.test_engine import CATALOG, OWNER, SqlHarness, spec

    monkeypatch.setattr(queries, "_CHUNK", 4)     # a few chunks of a few attempts
    monkeypatch.setattr(queries, "CHUNK", 4)
    url = f"sqlite:///{tmp_path}/orch.db"
    first = SqlHarness(open_store(url), OWNER, catalog=CATALOG)
    now = MIDNIGHT - timedelta(hours=3)
    ids = []
    for i in range(11):
        job = first.add_job(spec(name=f"job-{i}"), now)
        attempt = first.plan_attempt(job.id, CATALOG[0], f"l{i:012x}", None, now)
        first.set_attempt_state(attempt.id, AttemptState.LAUNCH_REQUESTED, now)
        ids.append(attempt.id)
    first.add_spend(1, ids[0], 1.0, now, now + timedelta(minutes=5), price_hr=12.0)
    first.flush()
    first.store.close()

    calls: list[int] = []
    real = queries.spend_marks
    monkeypatch.setattr(queries, "spend_marks", lambda tx, wanted: calls.append(len(wanted)) or real(tx, wanted))
    store = SqlEngineStore(open_store(url), OWNER, catalog=CATALOG)
    assert len(store.live_attempts()) == len(ids)
    marks = [store.spend_mark(i) for i in ids]
    assert calls == [len(ids)]
    assert marks == [now + timedelta(minutes=5)] + [None] * (len(ids) - 1)
    store.store.close()
