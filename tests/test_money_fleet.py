"""Money promises across a daemon restart and across a fleet's daemons on one PostgreSQL store (a lease moving
between them): the config budgets' ``stop_at_cap`` and $/h ceiling, a job's own ``budget_usd``,
``max_relaunches``, a deadline's move off spot.

The daemons are ``build_service`` with lease owners on one store, sharing one in-memory cloud, under one fake
clock; they tick one after the other, so each round is deterministic. Their lease TTL is longer than any clock
step here: a daemon's jobs move only when a test says so (it closes the daemon and lets its registration lapse,
or a daemon joining takes its share). The PostgreSQL tests run where ORCH_TEST_DATABASE_URL is set.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
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
from tests._store_db import BACKENDS, database_url_for
from tests.fakes.memory_provider import MemoryProvider
from tests.test_engine import ReportingMonitor
from tests.test_engine_budgets import ON_DEMAND, OWN, SPOT, Clock, job_id, manifest, submit

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


# --- a job's own budget_usd ----------------------------------------------------------------------------------

#: $1.20/h on demand; a $1.30 budget (a launch assumes at least an hour: $1.20, under it) is spent 65 minutes in.
A10G = replace(ON_DEMAND, instance_type="g5.xlarge", gpu="A10G-24G", gpu_count=1, vram_gb=24, price_hr=1.20)
BUDGET = 1.30
TICK = timedelta(minutes=5)


def budget_job(name: str) -> str:
    return (f"apiVersion: orch/v1\nkind: Job\nname: {name}\nproject: nlp\nresources: {{gpu: A10G-24G, count: 1}}\n"
            f"market: on-demand\npolicies: {{budget_usd: {BUDGET}, estimated_hours: 0.5}}\n"
            "run: {launcher: command, command: x}\n")


def ledger_usd(svc: Service, name: str) -> float:
    """What the store's ledger holds for job ``name`` (every daemon's charges), ``svc``'s buffer written first."""
    from orchestrator.store.models import Spend

    svc.engine_store.flush()                    # type: ignore[attr-defined]
    assert svc.store is not None
    with svc.store.transaction() as tx:
        job = tx.exec(select(Job.id).where(Job.name == name)).one()
        return sum(s.usd for s in tx.exec(select(Spend).where(Spend.job_id == job)))


def stopped_by_its_budget(svc: Service, aws: MemoryProvider, launched: datetime, stopped: datetime) -> None:
    """Job ``train`` was stopped once, within a tick of its budget, its whole spend counted (every daemon's)."""
    assert statuses(svc)["train"] == JobStatus.STOPPED.value
    assert ends(svc)["train"] == [("terminated", EndCause.BUDGET_STOP.value)]
    assert kinds_by_job(svc, "budget-stop") == Counter({"train": 1})
    assert not [i for i in aws.live() if i.job == "train"]
    one_tick = A10G.price_hr * (TICK / timedelta(hours=1))
    # Charged from its launch to its stop, once: nothing lost or charged twice where the daemons changed ...
    assert ledger_usd(svc, "train") == pytest.approx(A10G.price_hr * ((stopped - launched) / timedelta(hours=1)))
    # ... and stopped at the first tick its spend reached the budget, not one more budget's worth later.
    assert BUDGET - 1e-9 <= ledger_usd(svc, "train") <= BUDGET + one_tick


def _tick_until_stopped(daemons: list[Service], clock: Clock) -> datetime:
    """Tick ``daemons`` (each round: each in turn, then a tick of time) until ``train`` is stopped; when."""
    for _ in range(40):
        for svc in daemons:
            svc.reconciler.tick()
        if statuses(daemons[0])["train"] == JobStatus.STOPPED.value:
            return clock.now
        clock.now += TICK
    raise AssertionError(f"never stopped: {statuses(daemons[0])}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_jobs_own_budget_stops_it_once_across_a_restart(backend: str, tmp_path: Path) -> None:
    """30 minutes in ($0.60 of $1.30) the daemon restarts; the new one counts what its predecessor charged and
    stops the job when the whole reaches the budget, with one ``budget-stop`` event."""
    clock, aws = Clock(), MemoryProvider("aws", [A10G])
    with contextmanager(database_url_for)(backend, tmp_path) as url:
        name = "d1" if backend == "postgresql" else None
        svc = daemon(url, clock, {"aws": aws}, [A10G], name)
        try:
            submit(svc, tmp_path, clock, ("train", budget_job("train")))
            launched = clock.now
            for _ in range(6):
                svc.reconciler.tick()
                clock.now += TICK
            assert statuses(svc)["train"] == JobStatus.RUNNING.value
        finally:
            svc.close()
        svc = daemon(url, clock, {"aws": aws}, [A10G], name)       # a restart
        try:
            stopped = _tick_until_stopped([svc], clock)
            stopped_by_its_budget(svc, aws, launched, stopped)
            for _ in range(3):
                clock.now += TICK
                assert svc.reconciler.tick().launched == 0
            assert kinds_by_job(svc, "budget-stop") == Counter({"train": 1})
        finally:
            svc.close()


@pytest.mark.postgres
def test_a_jobs_own_budget_counts_what_each_daemon_charged_when_its_lease_moves(pg: str, tmp_path: Path) -> None:
    """d1 alone drives ``other`` and ``train`` for 30 minutes ($0.60 of train's $1.30); d2 joins, the shares
    change, and d1 gives ``train`` to d2 mid-run. d2 stops it when the spend BOTH charged reaches the budget:
    once, within a tick, its ledger whole (d1's part neither lost nor charged again)."""
    clock, aws = Clock(), MemoryProvider("aws", [A10G])
    d1 = daemon(pg, clock, {"aws": aws}, [A10G], "d1")
    d2: Service | None = None
    try:
        submit(d1, tmp_path, clock, ("other", budget_job("other").replace(f"budget_usd: {BUDGET}, ", "")))
        submit(d1, tmp_path, clock, ("train", budget_job("train")))
        launched = clock.now
        for _ in range(6):
            d1.reconciler.tick()
            clock.now += TICK
        assert held_by(d1, ("other", "train")) == {"other", "train"}
        d2 = daemon(pg, clock, {"aws": aws}, [A10G], "d2")
        stopped = _tick_until_stopped([d1, d2], clock)
        assert held_by(d1, ("other", "train")) == {"other"} and held_by(d2, ("other", "train")) == {"train"}
        stopped_by_its_budget(d2, aws, launched, stopped)
        assert ledger_usd(d2, "train") > 0.6 - 1e-9     # d1's part is in it
        assert statuses(d2)["other"] == JobStatus.RUNNING.value
    finally:
        d1.close()
        if d2 is not None:
            d2.close()


# --- max_relaunches ------------------------------------------------------------------------------------------

SPOT_A10G = replace(A10G, market=SPOT.market, price_hr=0.40)
SPOT_A10G_B = replace(SPOT_A10G, zone="use1-az2")
PLACES = [SPOT_A10G, SPOT_A10G_B, replace(A10G, zone="use1-az3")]
#: Three relaunches, then the fourth loss fails the job: spot preempted in one zone (it cools down for six
#: hours), then in the other, so the next machine is the on-demand one; it vanishes (lost); the next one
#: never reports (its boot timeout).
LOSSES = ("preempted", "preempted", "vanished", "boot-timeout")
ENDS = [("preempted", "preempted"), ("preempted", "preempted"), ("failed", "lost"), ("failed", "boot-timeout")]
RELAUNCH_SETTINGS = ServiceSettings(lease_ttl=TTL, boot_timeout=timedelta(minutes=20),
                                    heartbeat_timeout=timedelta(days=60), unreachable_grace=timedelta(days=60))


class MutingMonitor(ReportingMonitor):
    """Every agent answers, except (while ``mute_new``) those of machines it has not heard from yet: a node that
    never reports, which its boot timeout ends."""

    def __init__(self) -> None:
        super().__init__()
        self.heard: set[str] = set()
        self.mute_new = False

    def read(self, job, attempt, instance):  # type: ignore[no-untyped-def]
        if self.mute_new and instance.instance_id not in self.heard:
            return None
        self.heard.add(instance.instance_id)
        return super().read(job, attempt, instance)


def spot_daemon(url: str, clock: Clock, aws: MemoryProvider, monitor: MutingMonitor, name: str | None,
                ttl: timedelta = TTL) -> Service:
    svc = build_service(config=OrchConfig(owner="tester"), store_url=url, providers={"aws": aws},
                        catalog=PLACES, lease_owner=name, clock=clock, monitor=monitor,
                        settings=replace(RELAUNCH_SETTINGS, lease_ttl=ttl))
    if name is not None:
        svc.engine_store.join(clock())          # type: ignore[attr-defined]
    return svc


def lose(kind: str, aws: MemoryProvider, monitor: MutingMonitor) -> None:
    """The cloud (or the node) loses the job's one machine as ``kind`` says."""
    if kind == "boot-timeout":
        return          # nothing to do: its node has not reported since it started (``MutingMonitor.mute_new``)
    [machine] = aws.live()
    if kind == "preempted":
        aws.preempt(machine.instance_id)
    else:
        with aws.cloud.lock:
            del aws.cloud.instances[machine.instance_id]     # vanished: the cloud no longer lists it


def relaunch_cap_run(daemons: dict[str, Service], between: Callable[[], None], clock: Clock, aws: MemoryProvider,
                     monitor: MutingMonitor) -> Service:
    """Run ``train`` (max_relaunches 3) through ``LOSSES``, calling ``between`` after each loss was handled but
    the last (a restart, a lease moving); each round every daemon of ``daemons`` ticks. Returns one of them."""

    def first() -> Service:
        return next(iter(daemons.values()))

    def round_() -> None:
        for svc in list(daemons.values()):
            svc.reconciler.tick()
        clock.now += TICK

    def running() -> bool:
        return statuses(first())["train"] == JobStatus.RUNNING.value and len(aws.live()) == 1

    for n, kind in enumerate(LOSSES):
        for _ in range(30):                     # until it runs again (a boot timeout: until it ends, below)
            if running() or kind == "boot-timeout":
                break
            round_()
        assert running() or kind == "boot-timeout", (kind, statuses(first()), ends(first()))
        lose(kind, aws, monitor)
        for _ in range(6 if kind == "boot-timeout" else 1):      # a boot timeout: 20 minutes unheard
            round_()
        # The machine after the third loss never reports: its boot timeout is the fourth loss.
        monitor.mute_new = LOSSES[n + 1:n + 2] == ("boot-timeout",)
        if n < len(LOSSES) - 1:
            between()
    return first()


def capped(svc: Service) -> None:
    """``train`` failed at its fourth loss: 4 machines in all (3 relaunches), one ``relaunch-cap`` event."""
    assert ends(svc)["train"] == ENDS
    assert statuses(svc)["train"] == JobStatus.FAILED.value
    assert kinds_by_job(svc, "relaunch-cap") == Counter({"train": 1})
    assert svc.engine_store.job(job_id(svc, "train")).relaunch_count == 3


def spot_job() -> str:
    return ("apiVersion: orch/v1\nkind: Job\nname: train\nproject: nlp\nresources: {gpu: A10G-24G, count: 1}\n"
            "market: auto\npolicies: {max_relaunches: 3, preempted_zone_cooldown: 6h}\n"
            "run: {launcher: command, command: x}\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_relaunches_holds_with_the_daemon_restarted_after_every_loss(backend: str, tmp_path: Path) -> None:
    """Two preemptions, a vanished machine: each a relaunch, counted in the store, each handled by a daemon
    started after the last one; the fourth loss (a boot timeout) fails the job (one ``relaunch-cap``), nothing
    relaunches."""
    clock, aws, monitor = Clock(), MemoryProvider("aws", PLACES), MutingMonitor()
    name = "d1" if backend == "postgresql" else None
    with contextmanager(database_url_for)(backend, tmp_path) as url:
        daemons = {"d": spot_daemon(url, clock, aws, monitor, name)}

        def restart() -> None:
            daemons["d"].close()
            daemons["d"] = spot_daemon(url, clock, aws, monitor, name)

        try:
            submit(daemons["d"], tmp_path, clock, ("train", spot_job()))
            svc = relaunch_cap_run(daemons, restart, clock, aws, monitor)
            for _ in range(6):
                assert svc.reconciler.tick().launched == 0
                clock.now += TICK
            capped(svc)
            assert aws.live() == []
        finally:
            daemons["d"].close()


@pytest.mark.postgres
def test_max_relaunches_holds_with_the_jobs_lease_moving_to_the_other_daemon_after_every_loss(
        pg: str, tmp_path: Path) -> None:
    """Two daemons; after each loss the job's holder dies, the other takes the job over once the dead one's
    registration has lapsed (its lease TTL, 10 minutes here), and the dead one starts again beside it: each loss
    is handled by another daemon than the last, and the cap counts them all."""
    clock, aws, monitor = Clock(), MemoryProvider("aws", PLACES), MutingMonitor()
    ttl = timedelta(minutes=10)
    daemons = {n: spot_daemon(pg, clock, aws, monitor, n, ttl) for n in ("d1", "d2")}
    holders: list[str] = []

    def move() -> None:
        [holder] = [n for n, svc in daemons.items() if held_by(svc, ("train",))]
        holders.append(holder)
        daemons[holder].close()                                 # it dies
        [other] = [n for n in daemons if n != holder]
        for _ in range(3):                                      # 15 minutes: its registration lapses
            clock.now += TICK
            daemons[other].reconciler.tick()
        assert held_by(daemons[other], ("train",)) == {"train"}
        daemons[holder] = spot_daemon(pg, clock, aws, monitor, holder, ttl)     # back, beside the other

    try:
        submit(daemons["d1"], tmp_path, clock, ("train", spot_job()))
        svc = relaunch_cap_run(daemons, move, clock, aws, monitor)
        assert holders[:3] in (["d1", "d2", "d1"], ["d2", "d1", "d2"])      # each loss met by another daemon
        for _ in range(6):
            assert all(d.reconciler.tick().launched == 0 for d in daemons.values())
            clock.now += TICK
        capped(svc)
        assert aws.live() == []
    finally:
        for d in daemons.values():
            d.close()


# --- deadlines -----------------------------------------------------------------------------------------------

#: A 10-hour job due 10 h 15 min after it was applied: on spot still in its restart overhead, a preemption would
#: miss the deadline, so Uniform Progress's safety net moves it to on-demand (az3: no zone it ran in).
DEADLINE_SPOT = replace(A10G, market=SPOT.market, price_hr=0.40)
DEADLINE_OD = replace(A10G, zone="use1-az3")
DEADLINE_SETTINGS = replace(SETTINGS, recovery_policy="uniform-progress")


def deadline_daemon(url: str, clock: Clock, aws: MemoryProvider, name: str | None,
                    ttl: timedelta = TTL) -> Service:
    svc = build_service(config=OrchConfig(owner="tester"), store_url=url, providers={"aws": aws},
                        catalog=[DEADLINE_SPOT, DEADLINE_OD], lease_owner=name, clock=clock,
                        monitor=ReportingMonitor(), settings=replace(DEADLINE_SETTINGS, lease_ttl=ttl))
    if name is not None:
        svc.engine_store.join(clock())          # type: ignore[attr-defined]
    return svc


def deadline_job(clock: Clock) -> str:
    due = (clock.now + timedelta(hours=10, minutes=15)).isoformat()
    return ("apiVersion: orch/v1\nkind: Job\nname: train\nproject: nlp\nresources: {gpu: A10G-24G, count: 1}\n"
            f"market: auto\npolicies: {{estimated_hours: 10, deadline: '{due}'}}\n"
            "run: {launcher: command, command: x}\n")


def to_the_move(daemons: list[Service], clock: Clock, aws: MemoryProvider) -> None:
    """Tick ``daemons`` until ``train`` runs on spot; then the tick that moves it off spot, whose on-demand
    launch the cloud refuses (no capacity): the move is decided, its machine not had yet."""
    from providers.errors import InsufficientCapacityError

    for _ in range(6):
        if statuses(daemons[0])["train"] == JobStatus.RUNNING.value:
            break
        for svc in daemons:
            svc.reconciler.tick()
        clock.now += TICK
    assert [i.market for i in aws.live()] == [SPOT.market]
    aws.fail("launch", InsufficientCapacityError("use1-az3 full", provider="aws"))
    for svc in daemons:
        svc.reconciler.tick()
    assert kinds_by_job(daemons[0], "deadline-move") == Counter({"train": 1}) and aws.live() == []


def moved_once(svc: Service, aws: MemoryProvider) -> None:
    """``train`` runs on demand; it was moved off spot once, and no spot machine was launched after."""
    assert [(i.market, i.zone) for i in aws.live()] == [(DEADLINE_OD.market, DEADLINE_OD.zone)]
    assert [i.market for i in aws.cloud.instances.values()].count(SPOT.market) == 1
    assert kinds_by_job(svc, "deadline-move") == Counter({"train": 1})
    assert statuses(svc)["train"] == JobStatus.RUNNING.value


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.usefixtures("deadlines_out_of_reach")
def test_a_deadline_move_holds_across_a_restart_before_its_on_demand_machine(backend: str, tmp_path: Path) -> None:
    """The move off spot is decided and its spot machine ended; the on-demand launch is refused and the daemon
    restarts. The next machine is on demand: the decision is the store's (the ended attempt's cause). Before, the
    job came back PENDING and launched on spot again (its cheapest offer), to be moved again a tick later: a
    second spot machine billed through its restart overhead, a second ``deadline-move``."""
    clock, aws = Clock(), MemoryProvider("aws", [DEADLINE_SPOT, DEADLINE_OD])
    name = "d1" if backend == "postgresql" else None
    with contextmanager(database_url_for)(backend, tmp_path) as url:
        svc = deadline_daemon(url, clock, aws, name)
        try:
            submit(svc, tmp_path, clock, ("train", deadline_job(clock)))
            to_the_move([svc], clock, aws)
        finally:
            svc.close()
        svc = deadline_daemon(url, clock, aws, name)       # a restart
        try:
            for _ in range(4):
                clock.now += TICK
                svc.reconciler.tick()
            moved_once(svc, aws)
        finally:
            svc.close()


@pytest.mark.postgres
@pytest.mark.usefixtures("deadlines_out_of_reach")
def test_a_deadline_move_holds_when_the_jobs_lease_moves_before_its_on_demand_machine(
        pg: str, tmp_path: Path) -> None:
    """d1 moves the job off spot, its on-demand launch refused, and dies; d2 takes the job over once d1's
    registration lapsed and launches it on demand, not on spot again."""
    clock, aws = Clock(), MemoryProvider("aws", [DEADLINE_SPOT, DEADLINE_OD])
    ttl = timedelta(minutes=10)
    d1, d2 = (deadline_daemon(pg, clock, aws, n, ttl) for n in ("d1", "d2"))
    try:
        submit(d1, tmp_path, clock, ("train", deadline_job(clock)))
        to_the_move([d1, d2], clock, aws)
        assert held_by(d1, ("train",)) == {"train"}
        d1.close()                                           # it dies
        for _ in range(5):
            clock.now += TICK
            d2.reconciler.tick()
        assert held_by(d2, ("train",)) == {"train"}
        moved_once(d2, aws)
    finally:
        d1.close()
        d2.close()


# --- the $/h ceiling: a gang, two daemons ----------------------------------------------------------------------

PER_NODE = replace(ON_DEMAND, price_hr=1.0)


def gang_job(name: str) -> str:
    return (f"apiVersion: orch/v1\nkind: Job\nname: {name}\nproject: nlp\n"
            "resources: {gpu: A100-80G, count: 8, nodes: 2}\nmarket: on-demand\n"
            "run: {launcher: command, command: x}\n")


@pytest.mark.postgres
@pytest.mark.usefixtures("deadlines_out_of_reach")
def test_two_daemons_launching_gangs_at_once_never_break_the_ceiling_together(pg: str, tmp_path: Path) -> None:
    """Two 2-node gangs ($1/h a node) under a $3/h ceiling, one held by each daemon. d2 ticks in the middle of
    d1's launch: right after d1's locked check and reservation committed, before any cloud call. d2 must see
    both of d1's nodes reserved ($2/h) and refuse its gang ($2 + $2 > $3); a reservation of node 0 alone would
    let it launch ($1 + $2), and the two gangs together would burn $4/h."""
    from orchestrator.store.rollup import burn_by_job

    clock, aws = Clock(), MemoryProvider("aws", [PER_NODE])
    fleet_budget = Budget("fleet", max_usd_per_hour=3.0)
    d1, d2 = (daemon(pg, clock, {"aws": aws}, [PER_NODE], n, (fleet_budget,)) for n in ("d1", "d2"))
    store = d1.engine_store
    original = store.plan_attempt_within
    inside: list[int] = []

    def plan_then_other_daemon(*args, **kwargs):  # type: ignore[no-untyped-def]
        planned = original(*args, **kwargs)
        if not inside:
            inside.append(d2.reconciler.tick().launched)
        return planned

    store.plan_attempt_within = plan_then_other_daemon  # type: ignore[method-assign]
    try:
        submit(d1, tmp_path, clock, ("g1", gang_job("g1")), ("g2", gang_job("g2")))
        d1.reconciler.tick()
        assert (held_by(d1, ("g1", "g2")), held_by(d2, ("g1", "g2"))) == ({"g1"}, {"g2"})
        assert inside == [0]                         # d2 ticked inside d1's launch, and launched nothing
        for _ in range(3):
            clock.now += TICK
            d1.reconciler.tick()
            d2.reconciler.tick()
        assert sorted(i.job or "" for i in aws.live()) == ["g1", "g1"]
        with d1.store.transaction() as tx:           # type: ignore[union-attr]
            assert sum(b.usd_per_hour for b in burn_by_job(tx)) == 2.0
        assert kinds_by_job(d1, "budget-refused") == Counter({"g2": 1})
    finally:
        d1.close()
        d2.close()


@pytest.mark.postgres
@pytest.mark.usefixtures("deadlines_out_of_reach")
def test_a_cap_stops_drain_is_finished_by_the_daemon_that_takes_the_job_over(pg: str, tmp_path: Path) -> None:
    """d1 ends job a's on-demand machine at the cap (``stop_at_cap: all``) with a 30-minute drain, then dies.
    d2 takes the job over (d1's registration lapses after 10 minutes) mid-drain: it leaves the machine its drain,
    ends it when the drain has passed, writes no second ``budget-cap-stop`` and launches nothing."""
    clock, aws = Clock(), MemoryProvider("aws", [ON_DEMAND])
    nlp = Budget("nlp", BudgetMatch(frozenset({"nlp"})), monthly_usd=15.0, alert_at=(), stop_at_cap=CapStop.ALL)
    settings = replace(SETTINGS, lease_ttl=timedelta(minutes=10), notice_drain=timedelta(minutes=30))

    def member(name: str) -> Service:
        svc = build_service(config=OrchConfig(owner="tester", budgets=(nlp,)), store_url=pg, providers={"aws": aws},
                            catalog=[ON_DEMAND], lease_owner=name, clock=clock, monitor=ReportingMonitor(),
                            settings=settings)
        svc.engine_store.join(clock())          # type: ignore[attr-defined]
        return svc

    d1, d2 = member("d1"), member("d2")
    try:
        submit(d1, tmp_path, clock, ("a", manifest("a")))
        for _ in range(24):                     # $10/h: $15 after 90 minutes
            d1.reconciler.tick()
            d2.reconciler.tick()
            if kinds_by_job(d1, "budget-cap-stop"):
                break
            clock.now += TICK
        assert held_by(d1, ("a",)) == {"a"} and kinds_by_job(d1, "budget-cap-stop") == Counter({"a": 1})
        drain_until = clock.now + timedelta(minutes=30)
        d1.close()                              # it dies, mid-drain
        while clock.now + TICK < drain_until:
            clock.now += TICK
            assert d2.reconciler.tick().launched == 0
            assert len(aws.live()) == 1         # still draining: its agent may finish an upload
        assert held_by(d2, ("a",)) == {"a"}
        for _ in range(3):
            clock.now += TICK
            assert d2.reconciler.tick().launched == 0
        assert aws.live() == []
        assert ends(d2)["a"] == [("terminated", EndCause.BUDGET_CAP.value)]
        assert kinds_by_job(d2, "budget-cap-stop") == Counter({"a": 1})
        assert statuses(d2)["a"] == JobStatus.PENDING.value
    finally:
        d1.close()
        d2.close()
