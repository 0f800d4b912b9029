"""Money promises across a daemon restart and across a fleet's daemons on one PostgreSQL store (a lease moving
between them): the config budgets' ``stop_at_cap``, a job's own ``budget_usd``, ``max_relaunches``.

The daemons are ``build_service`` with lease owners on one store, sharing one in-memory cloud, under one fake
clock; they tick one after the other, so each round is deterministic. Their lease TTL is longer than any clock
step here: a daemon's jobs move only when a test says so (it closes the daemon and lets its registration lapse,
or a daemon joining takes its share). The PostgreSQL tests run where ORCH_TEST_DATABASE_URL is set.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import col, select

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, ServiceSettings, build_service
from orchestrator.engine.states import EndCause, JobStatus
from orchestrator.money.budgets import Budget, BudgetMatch, CapStop
from orchestrator.store.models import Attempt, Event, Job
from providers.base import Offer
from tests.fakes.memory_provider import MemoryProvider
from tests.test_engine import ReportingMonitor
from tests.test_engine_budgets import ON_DEMAND, OWN, SPOT, Clock, manifest, submit

#: Longer than any clock step here (a lapse only where a test makes one); liveness out of reach (every agent
#: answers: ReportingMonitor).
TTL = timedelta(hours=2)
SETTINGS = ServiceSettings(lease_ttl=TTL, boot_timeout=timedelta(days=60), heartbeat_timeout=timedelta(days=60),
                           unreachable_grace=timedelta(days=60))


def daemon(url: str, clock: Clock, clouds: dict[str, MemoryProvider], catalog: list[Offer], name: str | None,
           budgets: tuple[Budget, ...] = ()) -> Service:
    """One daemon (``name``: its lease owner; None: the single daemon of a SQLite store) on ``url``."""
    svc = build_service(config=OrchConfig(owner="tester", budgets=budgets), store_url=url, providers=clouds,
                        catalog=catalog, lease_owner=name, clock=clock, monitor=ReportingMonitor(), settings=SETTINGS)
    if name is not None:
        svc.engine_store.join(clock())          # type: ignore[attr-defined]
    return svc


def held_by(svc: Service, names: tuple[str, ...]) -> set[str]:
    assert svc.store is not None
    with svc.store.transaction() as tx:
        return {j.name for j in tx.exec(select(Job).where(col(Job.name).in_(names)))
                if j.id is not None and svc.engine_store.fleet.holds(j.id)}     # type: ignore[attr-defined]


def kinds_by_job(svc: Service, kind: str) -> Counter[str]:
    """How many ``kind`` events each job has, by job name."""
    assert svc.store is not None
    with svc.store.transaction() as tx:
        names = {j.id: j.name for j in tx.exec(select(Job))}
        return Counter(names[e.job_id] for e in tx.exec(select(Event).where(Event.kind == kind)))


def ends(svc: Service) -> dict[str, list[tuple[str, str | None]]]:
    """Each job's attempts, oldest first: (state, end cause)."""
    assert svc.store is not None
    out: dict[str, list[tuple[str, str | None]]] = {}
    with svc.store.transaction() as tx:
        names = {j.id: j.name for j in tx.exec(select(Job))}
        for a in tx.exec(select(Attempt).order_by(col(Attempt.id))):
            out.setdefault(names[a.job_id], []).append((a.state, a.end_cause))
    return out


def statuses(svc: Service) -> dict[str, str]:
    assert svc.store is not None
    with svc.store.transaction() as tx:
        return {j.name: j.status for j in tx.exec(select(Job))}


@pytest.fixture()
def pg(pg_url: str) -> Iterator[str]:
    yield pg_url


# --- the config budgets' stop_at_cap -------------------------------------------------------------------------

@pytest.mark.postgres
@pytest.mark.usefixtures("deadlines_out_of_reach")
def test_at_the_cap_two_daemons_end_each_paid_machine_once_and_relaunch_nothing_until_the_month_turns(
        pg: str, tmp_path: Path) -> None:
    """Budget nlp ($40 a month, ``stop_at_cap: all``) covers an on-demand job ``a`` ($10/h) on daemon d1, a spot
    job ``b`` ($10/h) on d2 and ``mine`` (a machine of your own, $0/h) on d1. At $40 each daemon ends the paid
    machine it holds (after the drain): ONE ``budget-cap-stop`` per paid job, none for ``mine``, which runs on.
    d1 restarts mid-drain; then hours of ticks of both launch nothing (one ``budget-refused`` per job, from
    whichever daemon) until the month turns, when both paid jobs launch again."""
    clock, aws, own = Clock(), MemoryProvider("aws", [ON_DEMAND, SPOT]), MemoryProvider("own", [OWN])
    nlp = Budget("nlp", BudgetMatch(frozenset({"nlp"})), monthly_usd=40.0, alert_at=(), stop_at_cap=CapStop.ALL)
    clouds, catalog = {"aws": aws, "own": own}, [ON_DEMAND, SPOT, OWN]
    fleet = {n: daemon(pg, clock, clouds, catalog, n, (nlp,)) for n in ("d1", "d2")}
    jobs = ("a", "mine", "b")

    def round_() -> int:
        launched = sum(fleet[n].reconciler.tick().launched for n in ("d1", "d2"))
        clock.now += timedelta(minutes=30)
        return launched

    try:
        submit(fleet["d1"], tmp_path, clock, ("a", manifest("a")),
               ("mine", manifest("mine", gpu="RTX4090-24G", count=1)), ("b", manifest("b", market="spot")))
        round_()
        assert (held_by(fleet["d1"], jobs), held_by(fleet["d2"], jobs)) == ({"a", "mine"}, {"b"})
        assert len(aws.live()) == 2 and len(own.live()) == 1
        for _ in range(5):                  # 2 h at $20/h: $40, the cap; d2 (ticking after d1) sees it first,
            round_()                        # d1 at its next tick
        assert kinds_by_job(fleet["d1"], "budget-cap-stop") == Counter({"a": 1, "b": 1})
        assert ends(fleet["d1"])["a"] == [("terminated", EndCause.BUDGET_CAP.value)]
        assert ends(fleet["d1"])["b"] == [("preempted", EndCause.BUDGET_CAP.value)]
        fleet["d1"].close()                 # a restart, mid-drain
        fleet["d1"] = daemon(pg, clock, clouds, catalog, "d1", (nlp,))
        for _ in range(12):                 # 6 h more: the drains pass, nothing relaunches from either daemon
            assert round_() == 0
        assert aws.live() == [] and len(own.live()) == 1
        assert statuses(fleet["d1"]) == {"a": "pending", "b": "pending", "mine": "running"}
        assert kinds_by_job(fleet["d1"], "budget-cap-stop") == Counter({"a": 1, "b": 1})
        assert kinds_by_job(fleet["d1"], "budget-refused") == Counter({"a": 1, "b": 1})
        clock.now = datetime(2027, 1, 1, 0, 5, tzinfo=UTC)     # the month turns: the cap is December's
        assert round_() == 2 and len(aws.live()) == 2
        assert kinds_by_job(fleet["d1"], "budget-cap-stop") == Counter({"a": 1, "b": 1})
    finally:
        for svc in fleet.values():
            svc.close()
