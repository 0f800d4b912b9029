"""Events are facts that change (issue 31): a job waiting a day for an offer used to write one ``no-offer`` row per
tick (5,760 a day at the default 15 s). A repeated condition is one event with a count and a last-seen time,
updated in place; `orch events` and the console show it once, with the count. Fake clock, SQLite (and
PostgreSQL where ORCH_TEST_DATABASE_URL is set for the store-level rule)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from orchestrator.app.jobs import apply, load
from orchestrator.app.status import events
from orchestrator.config.file import OrchConfig
from orchestrator.console.app import ConsoleApp
from orchestrator.console.auth import Guard
from orchestrator.daemon.assembly import build_service
from orchestrator.engine.events import EventKind
from orchestrator.store import repo
from orchestrator.store.db import Store
from orchestrator.store.models import Event
from providers.base import Market, Offer
from providers.gpus import Interconnect
from tests._store_db import BACKENDS, open_test_store
from tests.fakes.memory_provider import MemoryProvider
from tests.support.manifests import store_unchecked_job
from tests.test_engine import ScriptedMonitor

T0 = datetime(2026, 12, 1, 12, 0, 10, tzinfo=UTC)
A100 = Offer("aws", "p4d.24xlarge", "us-east-1", "use1-az1", "A100-80G", 8, 80, 96, 1152, Interconnect.NVLINK,
             Market.ON_DEMAND, 10.0, date(2026, 12, 1), True)
WANTS_H100 = ("apiVersion: orch/v1\nkind: Job\nname: waits\nresources: {gpu: H100, count: 8}\nmarket: on-demand\n"
              "run: {launcher: command, command: x}\n")
TICK = timedelta(minutes=15)     # 96 ticks make the day; the count, not the interval, is what is checked


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from open_test_store(request.param, tmp_path)


def test_a_day_of_waiting_is_one_counted_event(tmp_path: Path) -> None:
    now = [T0]
    svc = build_service(config=OrchConfig(owner="t"), store_url=f"sqlite:///{tmp_path / 'orch.db'}",
                        providers={"aws": MemoryProvider("aws", [A100])}, catalog=[A100], lease_owner=None,
                        clock=lambda: now[0], monitor=ScriptedMonitor())
    assert svc.store is not None
    (tmp_path / "waits.yaml").write_text(WANTS_H100)
    apply(svc.store, load([tmp_path / "waits.yaml"]), now=now[0])
    ticks = int(timedelta(hours=24) / TICK)
    for _ in range(ticks):
        svc.reconciler.tick()
        now[0] += TICK
    with svc.store.transaction() as tx:
        rows = tx.exec(select(Event).where(Event.kind == "no-offer")).all()
    assert len(rows) == 1
    assert rows[0].count == ticks and rows[0].ts == T0 and rows[0].seen_at == T0 + (ticks - 1) * TICK
    lines = [e.line() for e in events(svc.store, "waits") if e.kind == "no-offer"]
    assert len(lines) == 1 and f"(x{ticks}, last 2026-12-02 11:45:10)" in lines[0]
    page = _get(ConsoleApp(svc.store, Guard(None), clock=lambda: now[0]), "/events?job=waits")
    assert page.count("no eligible offer for the job") == 1 and f"×{ticks}" in page
    svc.store.close()


def test_a_repeat_counts_until_the_job_does_something_else(store: Store) -> None:
    with store.transaction() as tx:
        job = store_unchecked_job(tx, "j", {"name": "j"}, "h-j", now=T0).id
        for i in range(3):   # a waiting job cycling through two refusals: two rows, counted
            repo.record_event(tx, EventKind.LAUNCH_REFUSED, "aws p4d: no capacity", job_id=job,
                              ts=T0 + timedelta(minutes=i))
            repo.record_event(tx, EventKind.LAUNCH_REFUSED, "gcp a2: quota", job_id=job, ts=T0 + timedelta(minutes=i))
        repo.record_event(tx, EventKind.LAUNCHED, "aws p4d", job_id=job, ts=T0 + timedelta(minutes=5))
        repo.record_event(tx, EventKind.LAUNCH_REFUSED, "aws p4d: no capacity", job_id=job,
                          ts=T0 + timedelta(minutes=9))
        # kinds that are not conditions: never folded
        repo.record_event(tx, EventKind.CHECKPOINT, "same", job_id=job, ts=T0)
        repo.record_event(tx, EventKind.CHECKPOINT, "same", job_id=job, ts=T0)
    with store.transaction() as tx:
        rows = [(e.kind, e.message, e.count, e.seen_at) for e in repo.list_events(tx, job_id=job)
                if e.kind != "job.created"]
    assert rows == [("launch-refused", "aws p4d: no capacity", 3, T0 + timedelta(minutes=2)),
                    ("launch-refused", "gcp a2: quota", 3, T0 + timedelta(minutes=2)),
                    ("launched", "aws p4d", 1, T0 + timedelta(minutes=5)),
                    ("launch-refused", "aws p4d: no capacity", 1, T0 + timedelta(minutes=9)),
                    ("checkpoint", "same", 1, T0), ("checkpoint", "same", 1, T0)]


def _get(app: ConsoleApp, path: str) -> str:
    path, _, query = path.partition("?")
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query, "HTTP_HOST": "127.0.0.1:8470",
               "wsgi.input": io.BytesIO(b""), "CONTENT_LENGTH": "0", "wsgi.url_scheme": "http"}
    status: list[str] = []
    body = b"".join(app(environ, lambda s, h, e=None: status.append(s)))   # type: ignore[arg-type,misc]
    assert status[0].startswith("200"), status
    return body.decode()
