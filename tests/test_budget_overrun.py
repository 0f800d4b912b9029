"""An overrun of a budget's $/h ceiling is reported (issue 28, item 6): launches reserve their $/h under a
lock so they cannot cause one, but a ceiling lowered under running machines (or a price the cloud raised)
can; the review writes one ``budget-overrun`` event when it starts and one ``budget-overrun-ended`` when it
is over, whatever the number of ticks (or daemons) in between, and the overrun becomes a budget alert."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlmodel import select

from orchestrator.alerts.model import AlertKind
from orchestrator.daemon.alert_events import AlertMapper
from orchestrator.engine.events import EventKind
from orchestrator.money.budgets import Budget
from orchestrator.store.listen import CommittedEvent
from orchestrator.store.models import Job
from tests.fakes.memory_provider import MemoryProvider
from tests.test_engine_budgets import ON_DEMAND, Clock, build, events, manifest, submit, url  # noqa: F401


def test_an_overrun_is_reported_once_and_its_end_once(url: str, tmp_path: Path) -> None:  # noqa: F811
    clock, aws = Clock(), MemoryProvider("aws", [ON_DEMAND])
    roomy = build(url, tmp_path, clock, aws, (Budget("fleet", max_usd_per_hour=25.0),))
    try:
        submit(roomy, tmp_path, clock, ("a", manifest("a")), ("b", manifest("b")))
        assert roomy.reconciler.tick().launched == 2          # $20/h under $25/h
        assert events(roomy, "budget-overrun") == []
    finally:
        roomy.close()
    tight = build(url, tmp_path, clock, aws, (Budget("fleet", max_usd_per_hour=15.0),))   # lowered: $20/h > $15/h
    try:
        for _ in range(3):
            clock.now += timedelta(minutes=1)
            tight.reconciler.tick()
        [over] = events(tight, "budget-overrun")
        assert over.data == {"budget": "fleet", "burn_usd_per_hour": 20.0, "max_usd_per_hour": 15.0}
        assert "over its ceiling of $15.00/h" in over.message
        assert tight.store is not None
        with tight.store.transaction() as tx:
            job_a = tx.exec(select(Job).where(Job.name == "a")).one()
            job_a.desired_state = "deleted"
            tx.add(job_a)
        for _ in range(3):
            clock.now += timedelta(minutes=1)
            tight.reconciler.tick()
        assert len(events(tight, "budget-overrun")) == 1
        [ended] = events(tight, "budget-overrun-ended")
        assert ended.data["burn_usd_per_hour"] == 10.0
    finally:
        tight.close()


def test_an_overrun_is_a_budget_alert() -> None:
    from datetime import UTC, datetime

    event = CommittedEvent(1, datetime(2026, 12, 1, tzinfo=UTC), EventKind.BUDGET_OVERRUN, None, None, None,
                           "budget fleet: over")
    alert = AlertMapper().alert_for(event)
    assert alert is not None and alert.kind is AlertKind.BUDGET_THRESHOLD
