"""A job's own ``policies.budget_usd`` while it runs (orchestrator/engine/job_budget.py): the engine (default
wiring, SQLite store, an in-memory cloud whose machines bill at the offer's $/h, a fake clock)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, ServiceSettings, build_service
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.store import open_store, repo
from providers.base import Market, Offer
from providers.gpus import Interconnect
from tests.fakes.memory_provider import MemoryProvider
from tests.support.clock import ManualClock as Clock
from tests.support.manifests import manifest

#: Quoted at $0.95/h (a launch under a $1 budget assumes at least an hour), billed at $1.10/h: the price its
#: cloud reports for the machine, which is what the spend step charges.
A10G = Offer("aws", "g5.xlarge", "us-east-1", "use1-az1", "A10G-24G", 1, 24, 4, 16, Interconnect.PCIE,
             Market.ON_DEMAND, 0.95, date(2026, 12, 1), True)
BILLED_HR = 1.10
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TICK = timedelta(minutes=1)




@dataclass
class World:
    service: Service
    clock: Clock
    aws: MemoryProvider

    def add(self, name: str, budget: float, hours: float) -> int:
        m = manifest(name, gpus=["A10G-24G"], policies={"budget_usd": budget, "estimated_hours": hours})
        assert self.service.store is not None
        with self.service.store.transaction() as tx:
            repo.apply_jobs(tx, [repo.AppliedJob(m, "h-" + name)], now=self.clock())
            return repo.require_job(tx, name).id or 0

    def tick(self) -> None:
        self.service.reconciler.tick()
        for inst in self.aws.live():
            self.aws.plant(replace(inst, price_hr=BILLED_HR))
        self.clock.now += TICK

    def events(self, kind: str) -> list[str]:
        assert self.service.store is not None
        with self.service.store.transaction() as tx:
            return [e.message for e in repo.list_events(tx) if e.kind == kind]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    clock = Clock()
    aws = MemoryProvider("aws", [A10G])
    service = build_service(config=OrchConfig(owner="tester"), store=open_store(f"sqlite:///{tmp_path / 'o.db'}"),
                            providers={"aws": aws}, catalog=[A10G], clock=clock, settings=ServiceSettings())
    yield World(service, clock, aws)
    service.close()


def test_a_running_job_is_stopped_when_its_spend_reaches_its_budget(world: World) -> None:
    job = world.add("train", budget=1.0, hours=0.5)
    stopped_at: datetime | None = None
    for _ in range(180):
        now = world.clock()
        world.tick()
        if stopped_at is None and world.service.engine_store.job(job).status is JobStatus.STOPPED:
            stopped_at = now
    assert stopped_at is not None
    [attempt] = world.service.engine_store.attempts_for_job(job)
    assert attempt.state is AttemptState.TERMINATED and attempt.end_cause is EndCause.BUDGET_STOP
    assert world.aws.live() == []
    spent = world.service.engine_store.job(job).spent_usd
    one_tick = BILLED_HR * (TICK / timedelta(hours=1))
    assert 1.0 <= spent <= 1.0 + one_tick, spent                 # ended within one tick of $1.00
    assert stopped_at - T0 <= timedelta(hours=1 / BILLED_HR) + 2 * TICK   # launched at the first tick
    assert len(world.events("budget-stop")) == 1                 # and said once, not per tick
    assert world.events("budget-refused") == []                  # nothing tries to launch it again
    assert len(world.service.engine_store.attempts_for_job(job)) == 1


def test_a_job_its_budget_refuses_is_said_once_not_every_tick(world: World) -> None:
    world.add("big", budget=1.0, hours=2)        # $0.95/h for 2 h would break $1: refused at every launch try
    for _ in range(60):
        world.tick()
    assert len(world.events("budget-refused")) == 1
    assert world.aws.live() == []


class AskingBootstrapper:
    """Starts every machine at once; records each "checkpoint now, then stop" it is asked to pass on."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def start(self, job, attempt, instance) -> bool:  # type: ignore[no-untyped-def]
        return True

    def ask_checkpoint(self, job, attempt, instance, reason: str) -> bool:  # type: ignore[no-untyped-def]
        self.asked.append((attempt.launch_id, reason))
        return True


def _checkpointed_job(tmp_path: Path, boot: AskingBootstrapper) -> tuple[World, int]:
    """A service whose one job (budget $1, a checkpoint store) runs on an A10G machine of its own; the job's id."""
    from orchestrator.engine.hooks import NoStartupScript
    from tests.test_engine import ReportingMonitor

    clock, aws = Clock(), MemoryProvider("aws", [A10G])
    service = build_service(config=OrchConfig(owner="tester"), store=open_store(f"sqlite:///{tmp_path / 'o.db'}"),
                            providers={"aws": aws}, catalog=[A10G], clock=clock, settings=ServiceSettings(),
                            bootstrapper=boot, monitor=ReportingMonitor(), startup=NoStartupScript())
    m = manifest("ckpt", gpus=["A10G-24G"], policies={"budget_usd": 1.0, "estimated_hours": 0.5},
                 checkpoint={"path": "/ckpt", "store": "s3://bucket/run"})
    with service.store.transaction() as tx:      # type: ignore[union-attr]
        repo.apply_jobs(tx, [repo.AppliedJob(m, "h-ckpt")], now=clock())
        job = repo.require_job(tx, "ckpt").id or 0
    return World(service, clock, aws), job


def test_a_job_with_a_checkpoint_store_is_asked_to_checkpoint_first_then_ended(tmp_path: Path) -> None:
    boot = AskingBootstrapper()
    world, job = _checkpointed_job(tmp_path, boot)
    service, clock, aws = world.service, world.clock, world.aws
    try:
        while service.engine_store.job(job).status is not JobStatus.STOPPED:
            assert clock.now - T0 < timedelta(hours=2), "never stopped"
            world.tick()
        [attempt] = service.engine_store.attempts_for_job(job)
        assert attempt.state is AttemptState.TERMINATED and attempt.end_cause is EndCause.BUDGET_STOP
        assert [lid for lid, _ in boot.asked] == [attempt.launch_id]
        assert "budget $1.00 reached" in boot.asked[0][1]
        # The machine is left its drain to checkpoint and upload; the sweep ends it after, not before.
        assert attempt.drain_until is not None and len(aws.live()) == 1
        [said] = world.events("budget-stop")
        assert "1 machine asked to checkpoint first, checkpoint uploads from 1 machine until" in said
        while clock.now <= attempt.drain_until + TICK:
            world.tick()
        assert aws.live() == []
        assert len(world.events("budget-stop")) == 1 and len(boot.asked) == 1
    finally:
        service.close()


class FailingAskBootstrapper(AskingBootstrapper):
    """Its "checkpoint now" channel raises (a bug, a store client that fails oddly)."""

    def ask_checkpoint(self, job, attempt, instance, reason: str) -> bool:  # type: ignore[no-untyped-def]
        self.asked.append((attempt.launch_id, reason))
        raise RuntimeError("checkpoint channel broke")


def test_a_checkpoint_ask_that_raises_does_not_keep_the_budget_from_stopping_the_job(tmp_path: Path) -> None:
    """Asking the node to checkpoint first is best effort: when the ask raises, the job is stopped all the same
    (its machine ended at once, as one that cannot be asked), with the error in the tick's report. Before, the
    exception left the tick at the job budget step, every tick, so the job was never stopped and billed on."""
    boot = FailingAskBootstrapper()
    world, job = _checkpointed_job(tmp_path, boot)
    service, clock, aws = world.service, world.clock, world.aws
    try:
        while not boot.asked:
            assert clock.now - T0 < timedelta(hours=2), "never asked"
            world.tick()
        assert service.engine_store.job(job).status is JobStatus.STOPPED
        [attempt] = service.engine_store.attempts_for_job(job)
        assert attempt.state is AttemptState.TERMINATED and attempt.end_cause is EndCause.BUDGET_STOP
        assert attempt.drain_until is None and aws.live() == []
        assert len(world.events("budget-stop")) == 1
    finally:
        service.close()
