"""Steady ticks cost what changed (issue 34): the sync hands on an unchanged attempt's last observation, the
steps after skip it, and the spend step charges a steady machine at its phase, not every tick, while every
read of spend stays exact to the tick (orchestrator/engine/sync.py, orchestrator/engine/spend.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from orchestrator.engine.hooks import AgentReport
from orchestrator.engine.spend import SPEND_WRITE_EVERY
from orchestrator.engine.states import JobStatus
from orchestrator.engine.sync import SyncMemo, sync
from orchestrator.engine.tick import TickReport
from providers.base import InstanceState
from tests.fakes.memory_provider import MemoryProvider
from tests.fakes.memory_store import MemoryStore
from tests.test_engine import CATALOG, Clock, ScriptedMonitor, engine, live, settle, spec
from tests.test_engine import world as world  # the fixture (the memory and the SQLite store)

TICK = timedelta(seconds=15)


def test_a_steady_sync_observes_nothing_afresh_and_a_change_is_observed(world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, monitor, rec = world
    job = store.add_job(spec(), clock())
    settle(rec, clock)
    assert store.job(job.id).status is JobStatus.RUNNING
    memo = SyncMemo()
    first = sync(rec.deps, clock(), TickReport(), memo)
    [seen] = first.observed
    assert first.changed == {seen.attempt.id}           # nothing known yet: observed afresh
    clock.now += TICK
    second = sync(rec.deps, clock(), TickReport(), memo)
    assert second.changed == frozenset() and second.observed[0] is seen    # the same observation, handed on
    [inst] = live(aws, gcp)
    (aws if inst.provider == "aws" else gcp).plant(replace(inst, state=InstanceState.UNREACHABLE))
    clock.now += TICK
    third = sync(rec.deps, clock(), TickReport(), memo)
    assert third.changed == {seen.attempt.id}
    assert third.observed[0].instance is not None and third.observed[0].instance.state is InstanceState.UNREACHABLE
    (aws if inst.provider == "aws" else gcp).plant(inst)
    clock.now += TICK
    sync(rec.deps, clock(), TickReport(), memo)
    monitor.reports[inst.instance_id] = AgentReport(gpu_util_pct=(50.0,))     # the agent has something to say
    clock.now += TICK
    fourth = sync(rec.deps, clock(), TickReport(), memo)
    assert fourth.changed == {seen.attempt.id} and fourth.observed[0].agent == AgentReport(gpu_util_pct=(50.0,))


@pytest.mark.usefixtures("deadlines_out_of_reach")     # no agent reports here: not what this is about
@pytest.mark.parametrize("budget", [None, 10_000.0])
def test_a_steady_machine_is_charged_at_its_phase_and_read_exact(budget: float | None) -> None:
    """Without a budget a steady machine's charge waits in its meter (at most ``SPEND_WRITE_EVERY``); with one
    it is charged every tick; either way a read of the job's spend is exact to the last tick."""
    clock, store = Clock(), MemoryStore()
    aws = MemoryProvider("aws", CATALOG)
    rec = engine(store, {"aws": aws}, CATALOG, clock, monitor=ScriptedMonitor())
    job = store.add_job(spec(budget_usd=budget), clock())
    settle(rec, clock)
    [inst] = aws.live()
    rate = inst.price_hr if inst.price_hr is not None else 10.0
    start = clock()
    for _ in range(2):          # past the first tick's charge from the launch
        clock.now += TICK
        rec.tick()
    charged = len(store.charges)
    ticks = int(SPEND_WRITE_EVERY / TICK) * 2       # ten minutes of ticks
    for _ in range(ticks):
        clock.now += TICK
        rec.tick()
        since = max((c[2] for c in store.charges), default=start)
        assert clock() - since <= SPEND_WRITE_EVERY + TICK     # charged at least once per period
    new = len(store.charges) - charged
    if budget is None:
        assert 1 <= new <= 3            # about once per SPEND_WRITE_EVERY, not once per tick
    else:
        assert new == ticks             # money is promised on it: charged every tick
    spent = store.job(job.id).spent_usd     # a read of spend: the meters settled first
    assert max(c[2] for c in store.charges) == clock()
    first = min(c[1] for c in store.charges)
    assert spent == pytest.approx(rate * (clock() - first).total_seconds() / 3600)


def test_the_sync_compares_every_job_field_but_spend() -> None:
    """A field added to JobRecord must be compared when the sync hands on an observation (else a changed job
    would keep its stale observation); spend alone may move."""
    from dataclasses import fields

    from orchestrator.engine.ports import JobRecord
    from orchestrator.engine.sync import EQUAL_VALUE_FIELDS, SAME_OBJECT_FIELDS

    compared = [*SAME_OBJECT_FIELDS, *EQUAL_VALUE_FIELDS]
    assert len(compared) == len(set(compared))
    assert set(compared) == {f.name for f in fields(JobRecord)} - {"spent_usd"}
