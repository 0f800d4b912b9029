"""Budgets that hold, in the engine as ``build_service`` builds it on the SQL store: a launch that would break a
budget's $/h ceiling or monthly cap is refused (one ``budget-refused`` event with the typed refusal); a crossed
threshold sends ONE alert to a local webhook receiver; a receiver that hangs or is down delays no tick; at the
cap with ``stop_at_cap`` the running spot machine (``spot``), or every paid one, on-demand too (``all``), drains,
then ends, and its job waits; a $0/h machine of your own runs on.

Time is a fake clock; every wait is on an event (the receiver's, the dispatcher's)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import col, select

from orchestrator.alerts.redact import WebhookUrl
from orchestrator.app.jobs import apply, load
from orchestrator.config.alerts import AlertSettings, UrlSource, Webhook
from orchestrator.config.file import OrchConfig
from orchestrator.daemon.alerts import AlertDispatcher
from orchestrator.daemon.assembly import Service, build_service
from orchestrator.engine.states import EndCause, JobStatus
from orchestrator.money.budgets import Budget, BudgetLimit, BudgetMatch, CapStop
from orchestrator.store.models import Attempt, Event, Job
from providers.base import Market, Offer, OfferOrigin
from providers.gpus import Interconnect
from tests._store_db import BACKENDS, database_url_for
from tests._webhook_receiver import Receiver, start_receiver
from tests.fakes.memory_provider import MemoryProvider
from tests.support.clock import ManualClock
from tests.test_engine import ReportingMonitor

# Ticks 30 minutes apart, no agents reporting: the liveness deadlines are not what these tests are about.
pytestmark = pytest.mark.usefixtures("deadlines_out_of_reach")

T0 = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
ON_DEMAND = Offer("aws", "p4d.24xlarge", "us-east-1", "use1-az1", "A100-80G", 8, 80, 96, 1152, Interconnect.NVLINK,
                  Market.ON_DEMAND, 10.0, date(2026, 12, 1), True)
SPOT = replace(ON_DEMAND, market=Market.SPOT)
SPOT_B = replace(SPOT, zone="use1-az2")         # a preempted zone cools down: the relaunch looks here
# A machine of your own: $0/h, not paid, so no budget ends it.
OWN = replace(ON_DEMAND, provider="own", instance_type="box", region="home", zone=None, gpu="RTX4090-24G", gpu_count=1,
              vram_gb=24, interconnect=Interconnect.PCIE, price_hr=0.0, source=OfferOrigin.OWN)


def manifest(name: str, *, project: str = "nlp", market: str = "on-demand", gpu: str = "A100-80G",
             count: int = 8) -> str:
    return (f"apiVersion: orch/v1\nkind: Job\nname: {name}\nproject: {project}\n"
            f"resources: {{gpu: {gpu}, count: {count}}}\nmarket: {market}\nrun: {{launcher: command, command: x}}\n")


class Clock(ManualClock):
    """Starts at this file's T0."""

    def __init__(self) -> None:
        super().__init__(T0)


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = start_receiver()
    try:
        yield r
    finally:
        r.close()


def build(url: str, tmp_path: Path, clock: Clock, aws: MemoryProvider, budgets: tuple[Budget, ...],
          hook_url: str | None = None, **alerts: object) -> Service:
    settings = None
    if hook_url is not None:
        settings = replace(AlertSettings((Webhook("ops", UrlSource(url=WebhookUrl(hook_url))),)),
                           **alerts)  # type: ignore[arg-type]
    return build_service(config=OrchConfig(owner="tester", budgets=budgets, alerts=settings), store_url=url,
                         providers={"aws": aws}, catalog=[ON_DEMAND, SPOT, SPOT_B], lease_owner=None, clock=clock,
                         monitor=ReportingMonitor())     # every agent answers: these clocks run past the deadlines


def submit(svc: Service, tmp_path: Path, clock: Clock, *docs: tuple[str, str]) -> None:
    paths = []
    for name, text in docs:
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        paths.append(path)
    assert svc.store is not None
    apply(svc.store, load(paths), now=clock.now, prune=False)


def events(svc: Service, kind: str) -> list[Event]:
    assert svc.store is not None
    with svc.store.transaction() as tx:
        return list(tx.exec(select(Event).where(Event.kind == kind).order_by(col(Event.id))))


def job_status(svc: Service, name: str) -> str:
    assert svc.store is not None
    with svc.store.transaction() as tx:
        return tx.exec(select(Job.status).where(Job.name == name)).one()


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from database_url_for(request.param, tmp_path)


def test_a_launch_over_the_hourly_ceiling_is_refused_once_and_goes_ahead_when_room_is_made(url: str,
                                                                                         tmp_path: Path) -> None:
    clock, aws = Clock(), MemoryProvider("aws", [ON_DEMAND])
    nlp = Budget("nlp", BudgetMatch(frozenset({"nlp"})), max_usd_per_hour=15.0)
    svc = build(url, tmp_path, clock, aws, (nlp,))
    try:
        submit(svc, tmp_path, clock, ("a", manifest("a")), ("b", manifest("b")), ("c", manifest("c", project="cv")))
        report = svc.reconciler.tick()
        assert report.launched == 2                  # a (nlp, $10/h) and c (another project); b would make $20/h
        assert job_status(svc, "b") == JobStatus.PENDING.value
        for _ in range(3):
            clock.now += timedelta(minutes=1)
            assert svc.reconciler.tick().launched == 0
        [refused] = events(svc, "budget-refused")    # once, not once per tick
        assert refused.data["refusals"] == [{"budget": "nlp", "limit": "max_usd_per_hour", "limit_usd": 15.0,
                                             "current_usd": 10.0, "adding_usd": 10.0}]
        assert "budget nlp: $10.00/h running + $10.00/h would exceed its ceiling of $15.00/h" in refused.message
        # a ends: its machine is gone once the cloud says so, then b fits under the ceiling
        _delete_a_then_b_launches(svc, clock)
        assert job_status(svc, "b") == JobStatus.LAUNCHING.value
    finally:
        svc.close()


def _delete_a_then_b_launches(svc: Service, clock: Clock) -> None:
    """Job a is deleted; once its machine is gone, the next tick launches b (which a's $/h kept out)."""
    assert svc.store is not None
    with svc.store.transaction() as tx:
        job_a = tx.exec(select(Job).where(Job.name == "a")).one()
        job_a.desired_state = "deleted"
        tx.add(job_a)
    svc.reconciler.tick()
    clock.now += timedelta(minutes=1)
    assert svc.reconciler.tick().launched == 1


def job_id(svc: Service, name: str) -> int:
    assert svc.store is not None
    with svc.store.transaction() as tx:
        found = tx.exec(select(Job.id).where(Job.name == name)).one()
    assert found is not None
    return found


def test_a_restarted_daemon_does_not_write_a_refusal_again_until_the_job_launched_since(url: str,
                                                                                       tmp_path: Path) -> None:
    """Which limits last refused a job is the store's, not one daemon's memory: a restarted daemon writes no
    second ``budget-refused`` row, nor bumps the first one's count; a launch since makes the next one news."""
    clock, aws = Clock(), MemoryProvider("aws", [ON_DEMAND])
    nlp = Budget("nlp", BudgetMatch(frozenset({"nlp"})), max_usd_per_hour=15.0)
    svc = build(url, tmp_path, clock, aws, (nlp,))
    try:
        submit(svc, tmp_path, clock, ("a", manifest("a")), ("b", manifest("b")))
        assert svc.reconciler.tick().launched == 1               # a; b would make $20/h
        b = job_id(svc, "b")
        assert svc.engine_store.last_refusal(b) == frozenset({("nlp", BudgetLimit.HOURLY)})
    finally:
        svc.close()
    svc = build(url, tmp_path, clock, aws, (nlp,))               # a restart
    try:
        for _ in range(3):
            clock.now += timedelta(minutes=1)
            assert svc.reconciler.tick().launched == 0
        [refused] = events(svc, "budget-refused")
        assert refused.count == 1                                # not a repeat of the condition either
        _delete_a_then_b_launches(svc, clock)
        assert svc.engine_store.last_refusal(b) is None          # launched since: a new refusal is news
    finally:
        svc.close()


def test_a_relaunch_that_would_break_the_monthly_cap_is_refused(url: str, tmp_path: Path) -> None:
    clock, aws = Clock(), MemoryProvider("aws", [SPOT, SPOT_B])
    everything = Budget("everything", monthly_usd=100.0, alert_at=())
    svc = build(url, tmp_path, clock, aws, (everything,))
    try:
        submit(svc, tmp_path, clock, ("a", manifest("a", market="spot")))
        assert svc.reconciler.tick().launched == 1
        for _ in range(19):                          # 9.5 h at $10/h: $95 of $100
            clock.now += timedelta(minutes=30)
            svc.reconciler.tick()
        aws.preempt(aws.live()[0].instance_id)
        report = svc.reconciler.tick()
        assert report.preempted == 1 and report.launched == 0
        [refused] = events(svc, "budget-refused")
        [refusal] = refused.data["refusals"]
        assert (refusal["budget"], refusal["limit"], refusal["limit_usd"]) == ("everything", "monthly_usd", 100.0)
        assert refusal["current_usd"] == pytest.approx(95.0) and refusal["adding_usd"] == pytest.approx(10.0)
        assert job_status(svc, "a") == JobStatus.PENDING.value and aws.live() == []
    finally:
        svc.close()


def test_a_crossed_threshold_sends_one_alert(tmp_path: Path, receiver: Receiver) -> None:
    clock, aws = Clock(), MemoryProvider("aws", [ON_DEMAND])
    budget = Budget("everything", monthly_usd=100.0, alert_at=(0.5,))
    svc = build(f"sqlite:///{tmp_path / 'o.db'}", tmp_path, clock, aws, (budget,), f"{receiver.base}/hook/SECRET")
    try:
        submit(svc, tmp_path, clock, ("a", manifest("a")))
        svc.reconciler.tick()
        for _ in range(4):                            # $40: below 50 %
            clock.now += timedelta(hours=1)
            svc.reconciler.tick()
        assert events(svc, "budget-threshold") == []
        for _ in range(4):                            # $50, $60, $70, $80: crossed once
            clock.now += timedelta(hours=1)
            svc.reconciler.tick()
        assert receiver.wait_for(lambda r: len(r.received) == 1)
    finally:
        svc.close()                                   # queued alerts get their last try before this returns
    [alert] = receiver.received
    assert alert.body["kind"] == "budget-threshold"
    assert "budget everything: $50.00 of $100.00 spent in 2026-12 (50%), past its 50% alert" in alert.body["message"]
    [event] = events(svc, "budget-threshold")
    assert event.data == {"budget": "everything", "threshold": 0.5, "month": "2026-12", "spent_usd": 50.0,
                          "monthly_usd": 100.0}


def test_a_hanging_receiver_delays_no_tick(tmp_path: Path, receiver: Receiver) -> None:
    receiver.hang = threading.Event()
    receiver.hang.set()
    clock, aws = Clock(), MemoryProvider("aws", [ON_DEMAND])
    budget = Budget("everything", monthly_usd=20.0, alert_at=(0.25, 0.5, 0.75))
    svc = build(f"sqlite:///{tmp_path / 'o.db'}", tmp_path, clock, aws, (budget,), f"{receiver.base}/hook",
                timeout_s=120.0)
    try:
        submit(svc, tmp_path, clock, ("a", manifest("a")))
        svc.reconciler.tick()
        clock.now += timedelta(minutes=30)
        svc.reconciler.tick()                         # $5: 25 %, alerted
        assert receiver.hanging.wait(30)              # its POST is held by the receiver ...
        for _ in range(2):                            # ... and the engine ticks on: 50 %, 75 %
            clock.now += timedelta(minutes=30)
            svc.reconciler.tick()
        assert [e.data["threshold"] for e in events(svc, "budget-threshold")] == [0.25, 0.5, 0.75]
        [dispatcher] = [x for x in svc.store.feed.listeners if isinstance(x, AlertDispatcher)]  # type: ignore[union-attr]
        assert receiver.received == [] and dispatcher.stats()[0].queued >= 1
    finally:
        receiver.release.set()
        svc.close()


def test_a_receiver_that_is_down_delays_nothing(tmp_path: Path) -> None:
    with socket.socket() as s:                        # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    clock, aws = Clock(), MemoryProvider("aws", [ON_DEMAND])
    budget = Budget("everything", monthly_usd=20.0, alert_at=(0.5,))
    svc = build(f"sqlite:///{tmp_path / 'o.db'}", tmp_path, clock, aws, (budget,), f"http://127.0.0.1:{port}/hook",
                timeout_s=1.0, attempts=1)
    try:
        submit(svc, tmp_path, clock, ("a", manifest("a")))
        svc.reconciler.tick()
        for _ in range(4):
            clock.now += timedelta(minutes=30)
            svc.reconciler.tick()
        assert len(events(svc, "budget-threshold")) == 1
        [dispatcher] = [x for x in svc.store.feed.listeners if isinstance(x, AlertDispatcher)]  # type: ignore[union-attr]
        [worker] = dispatcher.workers
        assert worker.wait_until(lambda s: s.failed == 1, 30)   # tried and given up, beside the ticks
        assert job_status(svc, "a") == JobStatus.RUNNING.value or aws.live()
    finally:
        svc.close()


def test_at_the_cap_spot_machines_drain_then_end_and_the_job_waits(tmp_path: Path) -> None:
    clock, aws = Clock(), MemoryProvider("aws", [SPOT])
    nlp = Budget("nlp", BudgetMatch(frozenset({"nlp"})), monthly_usd=20.0, alert_at=(1.0,), stop_at_cap=CapStop.SPOT)
    svc = build(f"sqlite:///{tmp_path / 'o.db'}", tmp_path, clock, aws, (nlp,))
    try:
        submit(svc, tmp_path, clock, ("a", manifest("a", market="spot")))
        _to_the_cap(svc, clock)
        [stop] = events(svc, "budget-cap-stop")
        assert stop.data["budgets"] == "nlp"
        assert svc.store is not None
        with svc.store.transaction() as tx:
            [attempt] = tx.exec(select(Attempt)).all()
        assert (attempt.state, attempt.end_cause) == ("preempted", EndCause.BUDGET_CAP.value)
        assert attempt.drain_until == clock.now + timedelta(minutes=2)
        assert len(aws.live()) == 1                  # still draining: its agent may finish an upload
        assert job_status(svc, "a") == JobStatus.PENDING.value
        assert len(events(svc, "budget-refused")) == 1   # no relaunch at the cap
        _drain_ends_then_nothing_launches(svc, clock, aws, timedelta(minutes=3))
        assert len(events(svc, "budget-refused")) == 1 and len(events(svc, "budget-threshold")) == 1
    finally:
        svc.close()


def attempts(svc: Service) -> list[Attempt]:
    assert svc.store is not None
    with svc.store.transaction() as tx:
        return list(tx.exec(select(Attempt).order_by(col(Attempt.id))))


def _drain_ends_then_nothing_launches(svc: Service, clock: Clock, aws: MemoryProvider, wait: timedelta) -> None:
    """``wait`` later the drain has passed and the sweep ends the machine; then 90 minutes with no launch."""
    clock.now += wait
    svc.reconciler.tick()
    assert aws.live() == []
    for _ in range(3):
        clock.now += timedelta(minutes=30)
        assert svc.reconciler.tick().launched == 0


def _to_the_cap(svc: Service, clock: Clock) -> None:
    """Launch, then two hours at $10/h: $20, the cap of this file's budgets."""
    svc.reconciler.tick()
    clock.now += timedelta(hours=1)
    svc.reconciler.tick()                            # $10: under the cap
    assert events(svc, "budget-cap-stop") == []
    clock.now += timedelta(hours=1)
    svc.reconciler.tick()                            # $20: at the cap


def test_at_the_cap_with_stop_all_an_on_demand_machine_drains_then_ends_across_a_restart(tmp_path: Path) -> None:
    """``stop_at_cap: all``: the on-demand machine a spot-only stop left billing past the cap drains, then ends,
    and the job waits. The drain's end is the store's: a daemon restarted mid-drain ends it, and launches nothing."""
    clock, aws = Clock(), MemoryProvider("aws", [ON_DEMAND])
    nlp = Budget("nlp", BudgetMatch(frozenset({"nlp"})), monthly_usd=20.0, alert_at=(1.0,), stop_at_cap=CapStop.ALL)
    url = f"sqlite:///{tmp_path / 'o.db'}"
    svc = build(url, tmp_path, clock, aws, (nlp,))
    try:
        submit(svc, tmp_path, clock, ("a", manifest("a")))
        _to_the_cap(svc, clock)
        [stop] = events(svc, "budget-cap-stop")
        assert stop.data["budgets"] == "nlp" and stop.data["stop_at_cap"] == "all"
        [machine] = aws.live()
        assert stop.data["machines"] == [f"aws {machine.instance_id} (on-demand)"]
        assert len(events(svc, "budget-refused")) == 1   # no relaunch at the cap
        [attempt] = attempts(svc)
        # TERMINATED, not PREEMPTED: an on-demand machine ended at a cap is no preemption of its place
        assert (attempt.state, attempt.end_cause) == ("terminated", EndCause.BUDGET_CAP.value)
        assert attempt.drain_until == clock.now + timedelta(minutes=2)
        assert job_status(svc, "a") == JobStatus.PENDING.value
    finally:
        svc.close()
    clock.now += timedelta(minutes=1)
    svc = build(url, tmp_path, clock, aws, (nlp,))        # a restart, mid-drain
    try:
        svc.reconciler.tick()
        assert len(aws.live()) == 1                  # still draining: its agent may finish an upload
        _drain_ends_then_nothing_launches(svc, clock, aws, timedelta(minutes=2))
        assert job_status(svc, "a") == JobStatus.PENDING.value
        assert len(events(svc, "budget-cap-stop")) == 1         # the decision is not taken again
        # once in all: the restarted daemon reads the refusal its predecessor wrote (the store's newest)
        assert len(events(svc, "budget-refused")) == 1
    finally:
        svc.close()


@pytest.mark.parametrize("stop", [CapStop.NONE, CapStop.SPOT])
def test_at_the_cap_without_stop_all_an_on_demand_machine_runs_on(tmp_path: Path, stop: CapStop) -> None:
    clock, aws = Clock(), MemoryProvider("aws", [ON_DEMAND])
    nlp = Budget("nlp", BudgetMatch(frozenset({"nlp"})), monthly_usd=20.0, stop_at_cap=stop)
    svc = build(f"sqlite:///{tmp_path / 'o.db'}", tmp_path, clock, aws, (nlp,))
    try:
        submit(svc, tmp_path, clock, ("a", manifest("a")))
        _to_the_cap(svc, clock)
        clock.now += timedelta(minutes=30)
        svc.reconciler.tick()
        assert events(svc, "budget-cap-stop") == [] and len(aws.live()) == 1
        assert [(a.state, a.end_cause) for a in attempts(svc)] == [("running", None)]
        assert job_status(svc, "a") == JobStatus.RUNNING.value
    finally:
        svc.close()


def test_at_the_cap_with_stop_all_a_machine_of_your_own_runs_on(tmp_path: Path) -> None:
    """A $0/h machine (your own) costs nothing: the cap that ends the budget's paid machines leaves it running."""
    clock, aws, own = Clock(), MemoryProvider("aws", [ON_DEMAND]), MemoryProvider("own", [OWN])
    nlp = Budget("nlp", BudgetMatch(frozenset({"nlp"})), monthly_usd=20.0, stop_at_cap=CapStop.ALL)
    svc = build_service(config=OrchConfig(owner="tester", budgets=(nlp,)), store_url=f"sqlite:///{tmp_path / 'o.db'}",
                        providers={"aws": aws, "own": own}, catalog=[ON_DEMAND, OWN], lease_owner=None, clock=clock,
                        monitor=ReportingMonitor())
    try:
        submit(svc, tmp_path, clock, ("paid", manifest("paid")),
               ("mine", manifest("mine", gpu="RTX4090-24G", count=1)))
        _to_the_cap(svc, clock)
        [stop] = events(svc, "budget-cap-stop")
        assert svc.store is not None
        with svc.store.transaction() as tx:
            assert tx.exec(select(Job.name).where(Job.id == stop.job_id)).one() == "paid"
        clock.now += timedelta(minutes=3)
        svc.reconciler.tick()
        assert aws.live() == [] and len(own.live()) == 1
        assert job_status(svc, "paid") == JobStatus.PENDING.value
        assert job_status(svc, "mine") == JobStatus.RUNNING.value
    finally:
        svc.close()


def test_an_owner_budget_holds_for_the_engines_owner_only(tmp_path: Path) -> None:
    clock, aws = Clock(), MemoryProvider("aws", [ON_DEMAND])
    mine = Budget("tester", BudgetMatch(owners=frozenset({"tester"})), max_usd_per_hour=15.0)
    theirs = Budget("someone", BudgetMatch(owners=frozenset({"someone"})), max_usd_per_hour=1.0)
    svc = build(f"sqlite:///{tmp_path / 'o.db'}", tmp_path, clock, aws, (mine, theirs))
    try:
        submit(svc, tmp_path, clock, ("a", manifest("a")), ("b", manifest("b", project="cv")))
        assert svc.reconciler.tick().launched == 1    # $10/h under tester's $15/h; someone's budget is not ours
        [refused] = events(svc, "budget-refused")
        assert [r["budget"] for r in refused.data["refusals"]] == ["tester"]
    finally:
        svc.close()


@pytest.mark.parametrize(("offer", "stop", "ended"), [(SPOT, CapStop.SPOT, "preempted"),
                                                      (ON_DEMAND, CapStop.ALL, "terminated")])
def test_at_the_cap_a_gang_ends_whole_with_a_node_not_started_yet(tmp_path: Path, offer: Offer, stop: CapStop,
                                                                   ended: str) -> None:
    """``stop_at_cap`` ends a gang whole: node 0 running drains and ends, and a rank whose start is still
    pending (BOOTSTRAPPING: not reachable yet) ends with it. Before, only RUNNING nodes were ended, so the rank
    left behind (its node 0 gone, it could never start) billed on with no end in sight. On spot (``spot``) and
    on demand (``all``) alike."""
    from orchestrator.engine.hooks import Bootstrapper

    class RankZeroOnly(Bootstrapper):
        def start(self, job, attempt, instance):  # type: ignore[no-untyped-def]
            return attempt.node_rank == 0

    clock, aws = Clock(), MemoryProvider("aws", [replace(offer, price_hr=5.0)])
    nlp = Budget("nlp", BudgetMatch(frozenset({"nlp"})), monthly_usd=20.0, stop_at_cap=stop)
    svc = build_service(config=OrchConfig(owner="tester", budgets=(nlp,)), store_url=f"sqlite:///{tmp_path / 'o.db'}",
                        providers={"aws": aws}, catalog=[replace(offer, price_hr=5.0)], lease_owner=None, clock=clock,
                        monitor=ReportingMonitor(), bootstrapper=RankZeroOnly())
    gang = ("apiVersion: orch/v1\nkind: Job\nname: g\nproject: nlp\nresources: {gpu: A100-80G, count: 8, nodes: 2}\n"
            f"market: {offer.market.value}\nrun: {{launcher: command, command: x}}\n")
    try:
        submit(svc, tmp_path, clock, ("g", gang))
        svc.reconciler.tick()
        assert len(aws.live()) == 2
        clock.now += timedelta(hours=1)
        svc.reconciler.tick()                        # $10: under the cap; node 0 runs, node 1 waits to start
        assert events(svc, "budget-cap-stop") == []
        clock.now += timedelta(hours=1)
        svc.reconciler.tick()                        # $20: at the cap
        [stopped] = events(svc, "budget-cap-stop")       # one for the job, naming the machine it drains
        assert stopped.data["stop_at_cap"] == stop.value and len(stopped.data["machines"]) == 1
        clock.now += timedelta(minutes=3)
        svc.reconciler.tick()                        # the drain has passed
        clock.now += timedelta(minutes=1)
        svc.reconciler.tick()
        assert aws.live() == []
        assert svc.store is not None
        with svc.store.transaction() as tx:
            ends = sorted((a.node_rank, a.state, a.end_cause) for a in tx.exec(select(Attempt)).all())
        assert ends == [(0, ended, EndCause.BUDGET_CAP.value), (1, "terminated", EndCause.GANG.value)]
        assert job_status(svc, "g") == JobStatus.PENDING.value
    finally:
        svc.close()
