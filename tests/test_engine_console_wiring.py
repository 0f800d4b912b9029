"""The engine and the web console's store, wired: each tick's GPU readings are kept per attempt and minute, and a
console's "relaunch now" is taken once and honoured (the machine ends, the job launches again from its last
committed checkpoint). SQLite, and PostgreSQL where ORCH_TEST_DATABASE_URL is set."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import col, select

from orchestrator.app.jobs import apply, load
from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, build_service
from orchestrator.engine.hooks import AgentReport
from orchestrator.engine.states import EndCause
from orchestrator.store import requests
from orchestrator.store.gpu_util import util_since
from orchestrator.store.models import Attempt, Event, Job, JobRequest
from providers.base import Market, Offer
from providers.gpus import Interconnect
from tests._store_db import BACKENDS, database_url_for
from tests.fakes.memory_provider import MemoryProvider
from tests.support.clock import ManualClock
from tests.test_engine import ScriptedMonitor

T0 = datetime(2026, 12, 1, 12, 0, 10, tzinfo=UTC)
OFFER = Offer("aws", "p4d.24xlarge", "us-east-1", "use1-az1", "A100-80G", 8, 80, 96, 1152, Interconnect.NVLINK,
              Market.ON_DEMAND, 10.0, date(2026, 12, 1), True)
MANIFEST = ("apiVersion: orch/v1\nkind: Job\nname: train\nresources: {gpu: A100-80G, count: 8}\nmarket: on-demand\n"
            "run: {launcher: command, command: x}\n")


class Clock(ManualClock):
    """Starts at this file's T0."""

    def __init__(self) -> None:
        super().__init__(T0)


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from database_url_for(request.param, tmp_path)


def running(url: str, tmp_path: Path, clock: Clock, aws: MemoryProvider, monitor: ScriptedMonitor) -> Service:
    svc = build_service(config=OrchConfig(owner="tester"), store_url=url, providers={"aws": aws}, catalog=[OFFER],
                        lease_owner=None, clock=clock, monitor=monitor)
    (tmp_path / "train.yaml").write_text(MANIFEST)
    assert svc.store is not None
    apply(svc.store, load([tmp_path / "train.yaml"]), now=clock.now)
    svc.reconciler.tick()                          # launched
    clock.now += timedelta(seconds=20)
    svc.reconciler.tick()                          # bootstrapping -> running
    clock.now += timedelta(seconds=20)
    svc.reconciler.tick()
    return svc


def test_each_ticks_gpu_readings_are_kept_per_attempt_and_minute(url: str, tmp_path: Path) -> None:
    clock, aws, monitor = Clock(), MemoryProvider("aws", [OFFER]), ScriptedMonitor()
    svc = running(url, tmp_path, clock, aws, monitor)
    try:
        [inst] = aws.live()
        # three readings, at 12:01:10, 12:01:30 and 12:02:10: two in one minute, one in the next
        for pct, wait in ((90.0, 20), (70.0, 20), (20.0, 40)):
            monitor.reports[inst.instance_id] = AgentReport(gpu_util_pct=(pct, pct / 2))
            clock.now += timedelta(seconds=wait)
            svc.reconciler.tick()
        assert svc.store is not None
        with svc.store.transaction() as tx:
            attempt_id = tx.exec(select(Attempt.id)).one()
            minutes = util_since(tx, [attempt_id], T0)
        assert [(m.minute, m.samples, m.mean_pct, m.max_pct) for m in minutes] == [
            (datetime(2026, 12, 1, 12, 1, tzinfo=UTC), 2, pytest.approx((67.5 + 52.5) / 2), 90.0),
            (datetime(2026, 12, 1, 12, 2, tzinfo=UTC), 1, pytest.approx(15.0), 20.0)]
    finally:
        svc.close()


def test_a_relaunch_request_is_taken_once_and_relaunches_from_the_last_checkpoint(url: str, tmp_path: Path) -> None:
    clock, aws, monitor = Clock(), MemoryProvider("aws", [OFFER]), ScriptedMonitor()
    svc = running(url, tmp_path, clock, aws, monitor)
    try:
        [first] = aws.live()
        monitor.reports[first.instance_id] = AgentReport(checkpoints=(("s3://ckpt/step-40", 40),))
        clock.now += timedelta(seconds=20)
        svc.reconciler.tick()                      # the checkpoint is recorded
        assert svc.store is not None
        with svc.store.transaction() as tx:
            requests.request_relaunch(tx, "train", by="console", now=clock.now)
        clock.now += timedelta(seconds=20)
        report = svc.reconciler.tick()
        assert report.launched == 1
        [second] = aws.live()                      # the first machine is terminated
        assert second.instance_id != first.instance_id
        for _ in range(2):                         # taken once: no further relaunch
            clock.now += timedelta(seconds=20)
            assert svc.reconciler.tick().launched == 0
        with svc.store.transaction() as tx:
            attempts = list(tx.exec(select(Attempt).order_by(col(Attempt.id))))
            [request] = tx.exec(select(JobRequest)).all()
            kinds = [e.kind for e in tx.exec(select(Event).order_by(col(Event.id)))]
        old, new = attempts
        assert (old.state, old.end_cause) == ("terminated", EndCause.RELAUNCH_REQUESTED.value)
        assert new.checkpoint_restored == "s3://ckpt/step-40" and new.state == "running"
        assert request.taken_at is not None
        assert kinds.count("relaunch-now") == 1 and "job.relaunch-requested" in kinds
    finally:
        svc.close()


def test_a_request_for_a_job_torn_down_meanwhile_is_dropped(tmp_path: Path) -> None:
    clock, aws, monitor = Clock(), MemoryProvider("aws", [OFFER]), ScriptedMonitor()
    svc = running(f"sqlite:///{tmp_path / 'o.db'}", tmp_path, clock, aws, monitor)
    try:
        assert svc.store is not None
        with svc.store.transaction() as tx:
            requests.request_relaunch(tx, "train", now=clock.now)
            requests.request_stop(tx, "train", now=clock.now)
        clock.now += timedelta(seconds=20)
        assert svc.reconciler.tick().launched == 0
        with svc.store.transaction() as tx:
            [request] = tx.exec(select(JobRequest)).all()
            [dropped] = tx.exec(select(Event).where(Event.kind == "relaunch-dropped")).all()
        assert request.taken_at is not None        # taken, never left open ...
        assert "relaunch request dropped" in dropped.message and aws.live() == []   # ... and not honoured
    finally:
        svc.close()


def test_a_process_killed_between_acting_and_taking_leaves_the_request_open(tmp_path: Path) -> None:
    """The machines are ended before the request is taken: a tick killed in between (here: the take fails)
    leaves it open, and the next tick only launches (one relaunch, no second machine ended)."""
    clock, aws, monitor = Clock(), MemoryProvider("aws", [OFFER]), ScriptedMonitor()
    svc = running(f"sqlite:///{tmp_path / 'o.db'}", tmp_path, clock, aws, monitor)
    try:
        assert svc.store is not None
        with svc.store.transaction() as tx:
            requests.request_relaunch(tx, "train", now=clock.now)
        store = svc.engine_store
        take = store.take_relaunch_requests

        def killed(*args: object, **kw: object) -> None:
            raise SystemExit("killed")

        store.take_relaunch_requests = killed  # type: ignore[method-assign]
        clock.now += timedelta(seconds=20)
        with pytest.raises(SystemExit):
            svc.reconciler.tick()
        assert aws.live() == []                    # the machine was ended before the kill
        store.take_relaunch_requests = take  # type: ignore[method-assign]
        clock.now += timedelta(seconds=20)
        assert svc.reconciler.tick().launched == 1
        with svc.store.transaction() as tx:
            [request] = tx.exec(select(JobRequest)).all()
            ended = [a for a in tx.exec(select(Attempt)) if a.end_cause == EndCause.RELAUNCH_REQUESTED.value]
            job = tx.exec(select(Job)).one()
        assert request.taken_at is not None and len(ended) == 1 and len(aws.live()) == 1
        assert job.relaunch_count == 1
    finally:
        svc.close()
