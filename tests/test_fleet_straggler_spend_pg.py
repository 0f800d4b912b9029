"""Several daemons on PostgreSQL (ORCH_TEST_DATABASE_URL; skipped without it) charge a finished job's leftover
machine, exactly once between them.

A job succeeds and the cloud keeps its machine listed billing (a terminate it accepted and dropped): the sweep
asks again and the spend step charges the straggler until it is gone. A finished job needs no driver, so once its
last holder is gone no daemon holds it; the store wrote charges only for held jobs, so the machine billed on
uncharged. With one daemon (SQLite) it was charged all along. Driven by one injected clock; nothing waits on the
wall clock.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from sqlmodel import func, select

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, ServiceSettings, build_service
from orchestrator.engine.hooks import AgentReport
from orchestrator.engine.states import JobStatus
from orchestrator.store import open_store
from orchestrator.store.models import Attempt, Spend
from providers.base import Market, Offer
from providers.gpus import Interconnect
from tests.daemon_world import OWNER, PUBLIC_KEY, Clock, ScriptedMonitor, add_job
from tests.fakes.memory_provider import MemoryCloud, MemoryProvider

pytestmark = pytest.mark.postgres
PRICE = 1.2
T4 = Offer("aws", "g4dn.xlarge", "us-east-1", "use1-az1", "A100-80G", 1, 16, 4, 16, Interconnect.PCIE,
           Market.ON_DEMAND, PRICE, date(2026, 12, 1), True)
TTL = timedelta(seconds=60)
STEP = timedelta(seconds=30)


class DropsTerminates(MemoryProvider):
    """A cloud that answers every terminate and carries none out: the machine stays listed running."""

    def terminate(self, instance_id: str) -> None:
        self.cloud.calls["terminate"] += 1


def _daemon(url: str, cloud: MemoryCloud, clock: Clock, monitor: ScriptedMonitor, name: str) -> Service:
    settings = ServiceSettings(orphan_grace=timedelta(minutes=5), lease_ttl=TTL, ssh_public_key=PUBLIC_KEY)
    return build_service(config=OrchConfig(owner=OWNER), store=open_store(url),
                         providers={"aws": DropsTerminates("aws", [T4], cloud)}, catalog=[T4], clock=clock,
                         monitor=monitor, lease_owner=name, settings=settings)


def _spent(url: str) -> tuple[float, datetime]:
    """The ledger's total and when the one attempt was launched."""
    store = open_store(url)
    try:
        with store.transaction() as tx:
            [attempt] = list(tx.exec(select(Attempt)))
            total = tx.exec(select(func.coalesce(func.sum(Spend.usd), 0.0))).one()
            created = attempt.created_at
            return float(total), created if created.tzinfo else created.replace(tzinfo=UTC)
    finally:
        store.close()


def test_a_finished_jobs_leftover_machine_is_charged_once_by_the_fleet(pg_url: str) -> None:
    clock, cloud, monitor = Clock(), MemoryCloud(), ScriptedMonitor()
    names = ("d1", "d2", "d3")
    daemons = {n: _daemon(pg_url, cloud, clock, monitor, n) for n in names}
    try:
        for service in daemons.values():
            service.engine_store.join(clock())
        job_id = add_job(daemons["d1"].store, "train", now=clock(), gpus=["A100-80G"])

        def round_of(which: tuple[str, ...]) -> None:
            clock.now += STEP
            for n in which:
                for inst in cloud.instances.values():
                    if inst.instance_id not in monitor.reports or monitor.reports[inst.instance_id].exit_code is None:
                        monitor.reports[inst.instance_id] = AgentReport(heartbeat_at=clock())
                daemons[n].reconciler.tick()
                daemons[n].engine_store.flush()     # every charge written at once: none waits out a lapse

        for _ in range(6):
            round_of(names)
        [inst] = cloud.instances.values()
        holder = next(n for n, s in daemons.items() if s.engine_store.fleet.holds(job_id))
        others = tuple(n for n in names if n != holder)

        monitor.reports[inst.instance_id] = AgentReport(heartbeat_at=clock(), exit_code=0)
        for _ in range(2):
            round_of(names)
        assert daemons[holder].engine_store.job(job_id).status is JobStatus.SUCCEEDED
        assert cloud.calls["terminate"] >= 1 and not cloud.instances[inst.instance_id].state.is_gone

        daemons[holder].close()         # its holder goes: the finished job needs no driver, so nobody claims it
        del daemons[holder]
        for _ in range(120):            # an hour of two daemons ticking while the cloud bills the machine
            round_of(others)
        for n in others:
            daemons[n].engine_store.flush()
        total, launched = _spent(pg_url)
        billed_h = (clock() - launched).total_seconds() / 3600
        # Charged from its launch to the last tick, once: not stopping when its holder left, not twice, and
        # nothing lost while its lapsed holder was not yet reaped.
        assert total == pytest.approx(PRICE * billed_h, abs=1e-6), \
            (total, PRICE * billed_h)
    finally:
        for service in daemons.values():
            service.close()
