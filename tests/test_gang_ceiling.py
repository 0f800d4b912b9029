"""A multi-node gang is checked against the fleet's $/h ceiling, and reserved, as a whole (issue 28): the launch
gate writes every node's PLANNED attempt in the one locked step that checks the ledger, so when that step
commits (before any cloud call) the store already counts nodes x per-node $/h, and another daemon's check
sees it. Before, only node 0 was reserved in the step; the other ranks were planned after the lock was gone.
A rank's retry on another offer of the site, and a rank planned again beside node 0, go through the same step
(before, both were planned at their offer's price outside it, and launched over the ceiling).

On SQLite and (where ORCH_TEST_DATABASE_URL is set) PostgreSQL; a fake clock, the in-memory cloud."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, build_service
from orchestrator.engine import budget as engine_budget
from orchestrator.engine.states import JobStatus
from orchestrator.money.budget_launch import BudgetVerdict
from orchestrator.money.budgets import Budget
from orchestrator.store.rollup import burn_by_job
from providers.errors import InsufficientCapacityError
from tests._store_db import BACKENDS, database_url_for
from tests.fakes.memory_provider import MemoryProvider
from tests.test_engine import ReportingMonitor
from tests.test_engine_budgets import ON_DEMAND, Clock, events, job_status, submit

pytestmark = pytest.mark.usefixtures("deadlines_out_of_reach")

PER_NODE = replace(ON_DEMAND, price_hr=1.0)
GANG = ("apiVersion: orch/v1\nkind: Job\nname: gang\nproject: nlp\n"
        "resources: {gpu: A100-80G, count: 8, nodes: 2}\nmarket: on-demand\nrun: {launcher: command, command: x}\n")


def build(url: str, clock: Clock, aws: MemoryProvider, ceiling: float) -> Service:
    return build_service(config=OrchConfig(owner="tester", budgets=(Budget("fleet", max_usd_per_hour=ceiling),)),
                         store_url=url, providers={"aws": aws}, catalog=[PER_NODE], lease_owner=None, clock=clock,
                         monitor=ReportingMonitor())


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from database_url_for(request.param, tmp_path)


def _burn(svc: object) -> float:
    with svc.store.transaction() as tx:        # type: ignore[attr-defined]
        return sum(b.usd_per_hour for b in burn_by_job(tx))


def test_a_two_node_gang_over_the_ceiling_waits_with_one_event(url: str, tmp_path: Path) -> None:
    clock, aws = Clock(), MemoryProvider("aws", [PER_NODE])
    svc = build(url, clock, aws, 1.50)
    try:
        submit(svc, tmp_path, clock, ("gang", GANG))
        for _ in range(4):
            assert svc.reconciler.tick().launched == 0
            clock.now += timedelta(minutes=1)
        assert job_status(svc, "gang") == JobStatus.PENDING.value and aws.live() == []
        [refused] = events(svc, "budget-refused")
        assert refused.data["refusals"][0]["adding_usd"] == 2.0     # both nodes' $/h, not node 0's
    finally:
        svc.close()


def test_a_gang_reserves_every_nodes_price_in_the_locked_step(url: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    clock, aws = Clock(), MemoryProvider("aws", [PER_NODE])
    svc = build(url, clock, aws, 2.10)
    seen: list[float] = []
    real_plan = engine_budget.LaunchGate.plan

    def plan_then_sample(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        planned = real_plan(self, *args, **kwargs)
        # The locked step has committed and no cloud was asked yet: what another daemon's check would see.
        seen.append(_burn(svc))
        assert aws.live() == []
        return planned

    monkeypatch.setattr(engine_budget.LaunchGate, "plan", plan_then_sample)
    try:
        submit(svc, tmp_path, clock, ("gang", GANG))
        assert svc.reconciler.tick().launched == 2          # machines: both nodes
        assert seen == [2.0], "the whole gang (2 x $1/h) is reserved before any cloud call"
        assert len(aws.live()) == 2 and _burn(svc) == 2.0
        assert events(svc, "budget-refused") == []
    finally:
        svc.close()


def test_a_gangs_reservation_refuses_another_launch_and_dies_with_its_attempts(url: str, tmp_path: Path) -> None:
    """Right after the gang's step, a $1/h launch would make $3/h > $2.10/h: refused. When the cloud refuses
    the gang, every node's reservation ends with its attempt."""
    clock, aws = Clock(), MemoryProvider("aws", [PER_NODE])
    svc = build(url, clock, aws, 2.10)
    try:
        submit(svc, tmp_path, clock, ("gang", GANG))
        deps = svc.reconciler.deps
        gate = engine_budget.BudgetStep().gate(deps, clock.now)
        [job] = deps.store.active_jobs()
        planned = gate.plan(job, PER_NODE, 2.0, None)
        assert not isinstance(planned, BudgetVerdict) and [a.node_rank for a in planned] == [0, 1]
        assert len({a.generation for a in planned}) == 1
        single = replace(job, spec=replace(job.spec, plan=replace(job.spec.plan, nodes=1)))
        refused = gate.plan(single, PER_NODE, 1.0, None)
        assert isinstance(refused, BudgetVerdict) and not refused.allowed
        for a in planned:                       # the cloud refused: the attempts end, and their $/h with them
            deps.store.set_attempt_state(a.id, engine_budget.AttemptState.TERMINATED, clock.now, reason="x")
        assert _burn(svc) == 0.0
        assert not isinstance(gate.plan(single, PER_NODE, 1.0, None), BudgetVerdict)
    finally:
        svc.close()


DEARER = replace(PER_NODE, instance_type="p4de.24xlarge", zone="use1-az2", price_hr=2.0)   # the same site


def test_a_ranks_retry_on_a_dearer_offer_is_checked_and_refused_never_launched(url: str, tmp_path: Path) -> None:
    """2 nodes at $1/h fit a $2.50/h ceiling; when the cloud refuses rank 1 and its retry would go to the site's
    $2/h offer, node 0 ($1) + the retry ($2) = $3/h: the retry is checked in the locked step and refused, the
    gang ends, the job waits with one event. Every tick the cloud refuses rank 1 again; one event in all."""
    clock, aws = Clock(), MemoryProvider("aws", [PER_NODE, DEARER])
    svc = build_service(config=OrchConfig(owner="tester", budgets=(Budget("fleet", max_usd_per_hour=2.50),)),
                        store_url=url, providers={"aws": aws}, catalog=[PER_NODE, DEARER], lease_owner=None,
                        clock=clock, monitor=ReportingMonitor())
    full = InsufficientCapacityError("az1 full", provider="aws")
    try:
        submit(svc, tmp_path, clock, ("gang", GANG))
        for _ in range(3):
            aws.fail("launch", None, full)          # node 0 launches; rank 1 at $1/h is refused
            svc.reconciler.tick()
            assert aws.live() == []                 # node 0 ended with the gang
            assert job_status(svc, "gang") == JobStatus.PENDING.value
            clock.now += timedelta(minutes=1)
        assert all(i.price_hr == 1.0 for i in aws.cloud.instances.values()), "the dearer retry never launched"
        [refused] = events(svc, "budget-refused")
        assert refused.data["refusals"][0]["current_usd"] == 1.0 and refused.data["refusals"][0]["adding_usd"] == 2.0
        assert len(events(svc, "gang-aborted")) == 3
    finally:
        svc.close()


def test_a_rank_planned_again_beside_node_0_after_a_crash_is_checked_too(url: str, tmp_path: Path) -> None:
    """A previous process planned node 0 alone ($1/h) and died; completing the gang beside it would make $2/h
    under a $1.50/h ceiling: rank 1 is refused in the locked step, the gang ends, the job waits, one event."""
    clock, aws = Clock(), MemoryProvider("aws", [PER_NODE])
    svc = build(url, clock, aws, 1.50)
    try:
        submit(svc, tmp_path, clock, ("gang", GANG))
        store = svc.reconciler.deps.store
        [job] = store.active_jobs()
        head = store.plan_attempt(job.id, PER_NODE, "labcdefabcdef", None, clock.now)
        store.set_attempt_state(head.id, engine_budget.AttemptState.LAUNCH_REQUESTED, clock.now)
        store.set_job_status(job.id, JobStatus.LAUNCHING, clock.now)
        for _ in range(3):
            svc.reconciler.tick()
            assert aws.live() == [] and job_status(svc, "gang") == JobStatus.PENDING.value
            clock.now += timedelta(minutes=1)
        assert len(aws.cloud.instances) == 1, "node 0 was asked for again; rank 1 never"
        [refused] = events(svc, "budget-refused")
        assert refused.data["refusals"][0]["current_usd"] == 1.0 and refused.data["refusals"][0]["adding_usd"] == 1.0
    finally:
        svc.close()
