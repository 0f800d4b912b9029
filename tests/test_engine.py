"""The reconcile engine against in-memory clouds and store: launch, move on, recover, idle, collect."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import ServiceSettings, build_service
from orchestrator.engine.hooks import AgentReport, Bootstrapper, Monitor, Notice, NoticeKind, StartupRenderer
from orchestrator.engine.idle_rule import IdlePolicy
from orchestrator.engine.jobspec import JobSpec
from orchestrator.engine.ports import AttemptRecord, EngineStore, JobRecord
from orchestrator.engine.reconciler import Reconciler
from orchestrator.engine.recover import status_after
from orchestrator.engine.recovery_policy import RecoveryPolicy
from orchestrator.engine.states import AttemptState, DesiredState, EndCause, JobStatus
from orchestrator.offers.planner import PlanRequest
from orchestrator.store import open_store, repo
from orchestrator.store.models import Job
from orchestrator.store.sqlstore import SqlEngineStore
from providers.base import Instance, InstanceState, Market, Offer, Provider
from providers.errors import (
    InsufficientCapacityError,
    InvalidRequestError,
    ProviderUnavailableError,
    QuotaExceededError,
)
from providers.gpus import Interconnect
from tests.fakes.memory_provider import MemoryProvider
from tests.fakes.memory_store import MemoryStore
from tests.support.clock import ManualClock as Clock
from tests.support.manifests import manifest

OWNER = "tester"


def offer(provider: str, price: float, market: Market = Market.SPOT, zone: str | None = None,
          region: str = "r1") -> Offer:
    return Offer(provider, f"{provider}.8x", region, zone, "A100-80G", 8, 80, 96, 1152, Interconnect.NVLINK, market,
                 price, date(2025, 12, 1), True)


CATALOG = [
    offer("aws", 10.0, zone="use1-az1", region="us-east-1"),
    offer("aws", 11.0, zone="use1-az2", region="us-east-1"),
    offer("gcp", 12.0, region="us-central1"),
    offer("gcp", 30.0, market=Market.ON_DEMAND, region="us-central1"),
]



class ScriptedMonitor(Monitor):
    def __init__(self) -> None:
        self.reports: dict[str, AgentReport] = {}

    def read(self, job, attempt, instance):  # type: ignore[no-untyped-def]
        return self.reports.get(instance.instance_id)


class ReportingMonitor(ScriptedMonitor):
    """Every node's agent answers (an empty report where none is scripted): for tests about something other
    than liveness, whose clocks run past the boot and heartbeat deadlines (orchestrator/engine/liveness.py)."""

    def read(self, job, attempt, instance):  # type: ignore[no-untyped-def]
        return self.reports.get(instance.instance_id, AgentReport())


class RecordingBootstrapper(Bootstrapper):
    """Records what each node was started with; ``unreachable`` instances are not up yet."""

    def __init__(self) -> None:
        self.started: list[tuple[str, int, str | None, str | None]] = []
        self.unreachable: set[str] = set()

    def start(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        if instance.instance_id in self.unreachable:
            return False
        self.started.append((instance.instance_id, attempt.node_rank, attempt.master_addr, attempt.master_key))
        return True


def notice(kind: NoticeKind = NoticeKind.SPOT_INTERRUPTION, cloud: str = "aws", key: str = "k1") -> Notice:
    return Notice(cloud, kind, key, datetime(2026, 12, 1, 12, 0, tzinfo=UTC))


def engine(store: EngineStore, providers: dict[str, Provider], catalog: list[Offer], clock: Clock, *,
           monitor: Monitor | None = None, bootstrapper: Bootstrapper | None = None,
           recovery: RecoveryPolicy | None = None, startup: StartupRenderer | None = None,
           settings: ServiceSettings | None = None, launches_allowed: bool = True) -> Reconciler:
    """The engine as the daemon builds it (``build_service``), on the given store and clouds."""
    return build_service(config=OrchConfig(owner=OWNER), engine_store=store, providers=providers, catalog=catalog,
                         clock=clock, monitor=monitor or ScriptedMonitor(),
                         bootstrapper=bootstrapper or RecordingBootstrapper(), recovery=recovery, startup=startup,
                         settings=settings or ServiceSettings(), launches_allowed=launches_allowed).reconciler


class SqlHarness(SqlEngineStore):
    """The SQL store plus the two test verbs the memory store has (jobs come from real manifests)."""

    def add_job(self, spec: JobSpec, now: datetime) -> JobRecord:
        policies: dict[str, object] = {
            "estimated_hours": spec.plan.estimated_hours,
            "idle": {"min_gpu_util_pct": spec.idle.min_gpu_util_pct,
                     "window": f"{int(spec.idle.window.total_seconds())}s", "action": spec.idle.action.value}}
        if spec.budget_usd is not None:
            policies["budget_usd"] = spec.budget_usd
        if spec.max_relaunches != JobSpec.max_relaunches:
            policies["max_relaunches"] = spec.max_relaunches
        market = {frozenset({Market.SPOT}): "spot", frozenset({Market.ON_DEMAND}): "on-demand"}.get(
            spec.plan.markets, "auto")
        sections: dict[str, object] = {"providers": {"allow": list(spec.plan.providers_allow)}} \
            if spec.plan.providers_allow else {}
        m = manifest(spec.name, gpus=list(spec.plan.gpus), count=spec.plan.count, nodes=spec.plan.nodes,
                     policies=policies, market=market, **sections)
        with self.store.transaction() as tx:
            repo.apply_jobs(tx, [repo.AppliedJob(m, "h-" + m.name)], now=now)
            row = repo.require_job(tx, m.name)
        return self.job(row.id or 0)

    def request_down(self, job_id: int) -> None:
        with self.store.transaction() as tx:
            row = tx.get(Job, job_id)
            assert row is not None
            repo.set_desired_state(tx, row.name, DesiredState.DELETED)

    def kinds(self) -> list[str]:
        with self.store.transaction() as tx:
            return [e.kind for e in repo.list_events(tx)]

    def messages(self, kind: str) -> list[str]:
        with self.store.transaction() as tx:
            return [e.message for e in repo.list_events(tx) if e.kind == kind]


@pytest.fixture(params=["memory", "sqlite"])
def world(request, tmp_path):  # type: ignore[no-untyped-def]
    clock = Clock()
    if request.param == "memory":
        store = MemoryStore()
    else:
        store = SqlHarness(open_store(f"sqlite:///{tmp_path / 'orch.db'}"), OWNER, catalog=CATALOG)
    aws, gcp = MemoryProvider("aws", CATALOG), MemoryProvider("gcp", CATALOG)
    monitor = ScriptedMonitor()
    rec = engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock, monitor=monitor)
    return clock, store, aws, gcp, monitor, rec


def spec(**kw: object) -> JobSpec:
    base = JobSpec(name="train", plan=PlanRequest(gpus=("A100-80G",), count=8, estimated_hours=2))
    return replace(base, **kw)  # type: ignore[arg-type]


def live(*providers: MemoryProvider) -> list[Instance]:
    return [i for p in providers for i in p.live()]


def settle(rec: Reconciler, clock: Clock, n: int = 5) -> None:
    for _ in range(n):
        clock.advance(seconds=30)
        if rec.tick().quiet:
            return
    raise AssertionError("did not settle")


def test_launches_the_cheapest_and_moves_on_after_capacity_and_quota(world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _, rec = world
    job = store.add_job(spec(), clock())
    aws.fail("launch", InsufficientCapacityError("no cap", provider="aws"), QuotaExceededError("q", provider="aws"))
    rec.tick()
    [inst] = live(aws, gcp)
    assert inst.provider == "gcp" and inst.launch_id
    assert [a.state for a in store.attempts_for_job(job.id)] == [AttemptState.FAILED, AttemptState.FAILED,
                                                                AttemptState.LAUNCHED]
    assert store.kinds().count("launch-refused") == 2
    settle(rec, clock)
    assert store.job(job.id).status is JobStatus.RUNNING


def test_ambiguous_launch_failure_leaves_nothing_behind(world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _, rec = world
    store.add_job(spec(), clock())
    real_launch = aws.launch

    def launch_then_fail(s):  # type: ignore[no-untyped-def]
        real_launch(s)
        raise ProviderUnavailableError("timeout after accept", provider="aws")

    aws.launch = launch_then_fail  # type: ignore[method-assign]
    rec.tick()
    assert [i.provider for i in live(aws, gcp)] == ["gcp"]
    # The event names the provider once (the error's own prefix), as `orch apply`'s "waiting JOB: ..." shows it.
    assert set(store.messages("launch-failed")) == {"aws: timeout after accept"}


def test_preemption_relaunches_elsewhere_excluding_the_zone(world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _monitor, rec = world
    job = store.add_job(spec(), clock())
    rec.tick()
    [first] = live(aws, gcp)
    assert (first.provider, first.zone) == ("aws", "use1-az1")
    store.record_checkpoint(job.id, 1, "s3://ckpt/step-40", 40, clock())
    aws.preempt(first.instance_id, "Server.SpotInstanceTermination")
    clock.advance(seconds=30)
    report = rec.tick()
    assert report.preempted == 1 and report.relaunched == 1
    [second] = live(aws, gcp)
    assert (second.provider, second.zone) == ("aws", "use1-az2")       # not the preempted zone
    attempts = store.attempts_for_job(job.id)
    assert attempts[-1].checkpoint_restored == "s3://ckpt/step-40"
    assert store.job(job.id).relaunch_count == 1
    # Preempted again in az2 within the cool-down: both AWS zones are out, GCP is next.
    aws.preempt(second.instance_id)
    clock.advance(seconds=30)
    rec.tick()
    [third] = live(aws, gcp)
    assert third.provider == "gcp"


def test_notice_launches_the_replacement_and_drains_the_old_machine(world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, monitor, rec = world
    store.add_job(spec(), clock())
    rec.tick()
    clock.advance(seconds=30)
    rec.tick()
    [old] = live(aws, gcp)
    monitor.reports[old.instance_id] = AgentReport(gpu_util_pct=(90.0,), notice=notice(NoticeKind.SPOT_INTERRUPTION))
    clock.advance(seconds=10)
    rec.tick()
    assert len(live(aws, gcp)) == 2                  # the old one drains while the new one starts
    clock.advance(minutes=3)
    rec.tick()
    assert [i.instance_id for i in live(aws, gcp)] != [old.instance_id] and len(live(aws, gcp)) == 1


def test_idle_gpus_for_the_window_are_terminated_busy_ones_kept(world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, monitor, rec = world
    store.add_job(spec(idle=IdlePolicy(min_gpu_util_pct=5, window=timedelta(minutes=10))), clock())
    rec.tick()
    [inst] = live(aws, gcp)
    monitor.reports[inst.instance_id] = AgentReport(gpu_util_pct=(2.0,) * 8)
    for _ in range(10):                                # 9 minutes of 2%: not yet the whole window
        clock.advance(minutes=1)
        rec.tick()
    assert live(aws, gcp)
    for _ in range(3):
        clock.advance(minutes=1)
        rec.tick()
    assert live(aws, gcp) == []
    assert "idle-shutdown" in store.kinds()


def test_down_terminates_and_confirms(world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _, rec = world
    job = store.add_job(spec(), clock())
    rec.tick()
    store.request_down(job.id)
    settle(rec, clock)
    assert live(aws, gcp) == []
    assert [a.state for a in store.attempts_for_job(job.id)] == [AttemptState.TERMINATED]


def test_orphans_are_terminated_after_the_grace(world) -> None:  # type: ignore[no-untyped-def]
    clock, _store, aws, _gcp, _, rec = world
    aws.plant(Instance("aws", "i-orphan", "lffffffffffff", OWNER, InstanceState.RUNNING, "p4d", "us-east-1"))
    aws.plant(Instance("aws", "i-theirs", "l000000000000", "someone-else", InstanceState.RUNNING, "p4d", "us-east-1"))
    rec.tick()
    assert {i.instance_id for i in live(aws)} == {"i-orphan", "i-theirs"}
    clock.advance(minutes=11)
    rec.tick()
    assert {i.instance_id for i in live(aws)} == {"i-theirs"}


def test_a_machine_whose_attempt_ended_elsewhere_is_swept_though_the_listing_is_the_same(world) -> None:  # type: ignore[no-untyped-def]
    # The sweep keeps its scan of an unchanged listing (the very same objects): the live launch ids moving
    # (an attempt ended by another process) must still make the machine a straggler.
    clock, store, aws, gcp, _, rec = world
    job = store.add_job(spec(), clock())
    settle(rec, clock)
    (machine,) = live(aws, gcp)
    (attempt,) = [a for a in store.attempts_for_job(job.id) if a.state.is_live]
    clock.advance(seconds=30)
    rec.tick()
    assert live(aws, gcp) == [machine]      # a steady tick: the same listing, nothing swept
    store.set_attempt_state(attempt.id, AttemptState.TERMINATED, clock(), reason="ended by another process")
    clock.advance(seconds=30)
    rec.tick()
    assert machine.instance_id not in {i.instance_id for i in live(aws, gcp)}   # (the job may get another)


def test_budget_refuses_a_launch_with_an_event(world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _, rec = world
    store.add_job(spec(budget_usd=15.0), clock())       # cheapest is 10 $/h x 2 h = 20 > 15
    rec.tick()
    assert live(aws, gcp) == []
    assert "budget-refused" in store.kinds()


def test_adopts_an_instance_launched_before_a_crash(world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _, rec = world
    job = store.add_job(spec(), clock())
    # A previous process wrote LAUNCH_REQUESTED, the cloud created the instance, then the process died.
    attempt = store.plan_attempt(job.id, CATALOG[0], "labcdefabcdef", None, clock())
    store.set_attempt_state(attempt.id, AttemptState.LAUNCH_REQUESTED, clock())
    from providers.base import LaunchSpec

    aws.launch(LaunchSpec("labcdefabcdef", OWNER, "train", CATALOG[0]))
    report = rec.tick()
    assert report.adopted == 1 and report.launched == 0
    assert len(live(aws, gcp)) == 1


def test_an_allow_list_of_unconfigured_providers_launches_nothing() -> None:
    clock, store = Clock(), MemoryStore()
    aws = MemoryProvider("aws", CATALOG)
    rec = engine(store, {"aws": aws}, CATALOG, clock)
    base = spec()
    store.add_job(replace(base, plan=replace(base.plan, providers_allow=("azure",))), clock())
    rec.tick()
    assert aws.live() == [] and "no-offer" in store.kinds()


def test_a_machine_not_reachable_yet_is_bootstrapping_until_its_job_starts(world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _, rec = world
    boot = rec.hooks.bootstrapper
    job = store.add_job(spec(), clock())
    rec.tick()
    [inst] = live(aws, gcp)
    boot.unreachable.add(inst.instance_id)
    for _ in range(2):
        clock.advance(seconds=30)
        rec.tick()
    [attempt] = store.attempts_for_job(job.id)
    assert attempt.state is AttemptState.BOOTSTRAPPING and store.job(job.id).status is JobStatus.LAUNCHING
    boot.unreachable.clear()
    clock.advance(seconds=30)
    rec.tick()
    [attempt] = store.attempts_for_job(job.id)
    assert attempt.state is AttemptState.RUNNING and store.job(job.id).status is JobStatus.RUNNING


def test_with_launches_not_allowed_no_machine_is_bought_and_teardown_still_works() -> None:
    clock, store = Clock(), MemoryStore()
    aws = MemoryProvider("aws", CATALOG)
    preempted, downed = store.add_job(spec(), clock()), store.add_job(replace(spec(), name="downed"), clock())
    settle(engine(store, {"aws": aws}, CATALOG, clock), clock)
    machine = {a.job_id: a.instance_id for a in store.live_attempts()}
    down_only = engine(store, {"aws": aws}, CATALOG, clock, launches_allowed=False)
    pending = store.add_job(replace(spec(), name="pending"), clock())
    aws.preempt(machine[preempted.id] or "")
    store.request_down(downed.id)
    clock.advance(seconds=30)
    report = down_only.tick()
    assert report.preempted == 1 and report.launched == 0 and aws.live() == []
    assert [store.job(j.id).status for j in (preempted, downed, pending)] == [JobStatus.RECOVERING, JobStatus.STOPPED,
                                                                          JobStatus.PENDING]
    clock.advance(seconds=30)
    engine(store, {"aws": aws}, CATALOG, clock).tick()         # a daemon (or orch apply --launch) buys them
    wanted = {a.launch_id for j in (preempted, pending) for a in store.attempts_for_job(j.id) if a.state.is_live}
    assert {i.launch_id for i in aws.live()} == wanted and len(wanted) == 2


def test_the_sql_store_parses_each_manifest_once_not_per_tick_or_read(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.manifest.schema import Manifest

    clock = Clock()
    store = SqlHarness(open_store(f"sqlite:///{tmp_path / 'orch.db'}"), OWNER, catalog=CATALOG)
    jobs = [store.add_job(replace(spec(), name=f"job-{i}"), clock()) for i in range(3)]
    fresh = SqlHarness(store.store, OWNER, catalog=CATALOG)          # a restarted daemon: nothing parsed yet
    parsed: list[str] = []
    real, real_json = Manifest.model_validate, Manifest.model_validate_json

    def counting(doc, *a, **kw):  # type: ignore[no-untyped-def]
        parsed.append(doc["name"])
        return real(doc, *a, **kw)

    def counting_json(text, *a, **kw):  # type: ignore[no-untyped-def]
        found = real_json(text, *a, **kw)
        parsed.append(found.name)
        return found

    monkeypatch.setattr(Manifest, "model_validate", counting)
    monkeypatch.setattr(Manifest, "model_validate_json", counting_json)
    for _ in range(3):
        clock.advance(seconds=15)
        fresh.begin_tick(clock())
        assert [j.manifest.name for j in fresh.active_jobs()] == ["job-0", "job-1", "job-2"]
        assert all(fresh.job(j.id).manifest.name == j.name for j in jobs)
    # The three differ only by name: one shape, validated once (the others are copies under their names,
    # orchestrator/store/specs.py Shapes; tests/test_engine_specs.py holds the copies to full validation).
    assert parsed == ["job-0"]


@pytest.mark.parametrize(("cause", "then", "relaunched"), [
    (EndCause.SUCCEEDED, JobStatus.SUCCEEDED, False),    # killed after its machine ended, before the job's status
    (EndCause.PREEMPTED, JobStatus.LAUNCHING, True),     # killed after the sync wrote a preemption
    (EndCause.LAUNCH_REFUSED, JobStatus.LAUNCHING, True),
])
def test_a_job_left_with_no_machine_by_a_crash_gets_the_decision_it_missed(
        world, cause: EndCause, then: JobStatus, relaunched: bool) -> None:  # type: ignore[no-untyped-def]
    clock, store, _aws, _gcp, _, rec = world
    job = store.add_job(spec(), clock())
    settle(rec, clock)
    [attempt] = store.attempts_for_job(job.id)
    store.set_attempt_state(attempt.id, AttemptState.TERMINATED, clock(), reason="killed mid-tick", cause=cause)
    clock.advance(seconds=30)
    rec.tick()
    assert store.job(job.id).status is then and "no-machine" in store.kinds()
    assert (len(store.attempts_for_job(job.id)) == 2) is relaunched


def test_status_after_prefers_recovery_then_failure() -> None:
    assert status_after({EndCause.GANG, EndCause.NOTICED}) is JobStatus.RECOVERING
    assert status_after({EndCause.GANG, EndCause.FAILED}) is JobStatus.FAILED
    assert status_after({EndCause.IDLE_STOPPED, EndCause.GANG}) is JobStatus.STOPPED
    assert status_after({EndCause.SUCCEEDED}) is JobStatus.SUCCEEDED
    assert status_after({EndCause.SUCCEEDED, EndCause.GANG}) is JobStatus.PENDING
    assert status_after(set()) is JobStatus.PENDING


def test_a_swapped_catalog_is_what_the_engine_plans_from_next() -> None:
    """The daemon's scheduled refresh swaps ``Reconciler.catalog`` (orchestrator/daemon/catalog_schedule.py)."""
    clock, store = Clock(), MemoryStore()
    cheaper = replace(offer("gcp", 5.0, region="us-central1"), instance_type="gcp.8x-refreshed")
    aws, gcp = MemoryProvider("aws", CATALOG), MemoryProvider("gcp", [*CATALOG, cheaper])
    rec = engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock)
    rec.catalog = [*CATALOG, cheaper]
    assert cheaper in rec.catalog
    store.add_job(spec(), clock())
    rec.tick()
    [inst] = live(aws, gcp)
    assert (inst.provider, inst.price_hr) == ("gcp", 5.0)


def test_an_advisory_notice_is_one_event_and_never_ends_the_attempt(world) -> None:  # type: ignore[no-untyped-def]
    """An AWS rebalance recommendation / GCE maintenance event: the agent already asked for a checkpoint; the
    engine shows it (one event per notice, however many ticks report it) and the machine keeps running."""
    clock, store, aws, gcp, monitor, rec = world
    store.add_job(spec(), clock())
    rec.tick()
    clock.advance(seconds=30)
    rec.tick()
    [machine] = live(aws, gcp)
    monitor.reports[machine.instance_id] = AgentReport(
        gpu_util_pct=(90.0,), advisories=(notice(NoticeKind.REBALANCE, key="aws:rebalance:t1"),))
    for _ in range(3):
        clock.advance(seconds=10)
        rec.tick()
    assert [i.instance_id for i in live(aws, gcp)] == [machine.instance_id]     # not drained, nothing relaunched
    assert store.kinds().count("advisory-notice") == 1
    assert "preempted" not in store.kinds()
    monitor.reports[machine.instance_id] = AgentReport(gpu_util_pct=(90.0,), advisories=(
        notice(NoticeKind.REBALANCE, key="aws:rebalance:t1"),
        notice(NoticeKind.MAINTENANCE, cloud="gcp", key="gcp:maintenance:MIGRATE_ON_HOST_MAINTENANCE")))
    clock.advance(seconds=10)
    rec.tick()
    assert store.kinds().count("advisory-notice") == 2
    assert [i.instance_id for i in live(aws, gcp)] == [machine.instance_id]


def test_an_on_demand_machine_that_keeps_vanishing_is_relaunched_at_most_max_relaunches_times(world) -> None:  # type: ignore[no-untyped-def]
    """A lost machine (an on-demand one the cloud no longer lists) is relaunched like a preempted one, and counts
    against ``max_relaunches``: a job whose machines keep vanishing is failed at the cap (one ``relaunch-cap``
    event), never relaunched forever, each new machine billed."""
    clock, store, aws, gcp, _, rec = world
    job = store.add_job(spec(max_relaunches=2, plan=PlanRequest(gpus=("A100-80G",), count=8, estimated_hours=2,
                                                                markets=frozenset({Market.ON_DEMAND}))), clock())
    rec.tick()
    for _ in range(6):
        machines = live(aws, gcp)
        for inst in machines:
            with gcp.cloud.lock:
                del gcp.cloud.instances[inst.instance_id]       # vanished: the cloud no longer lists it
        clock.advance(seconds=30)
        rec.tick()
    attempts = store.attempts_for_job(job.id)
    assert len(attempts) == 3, [(a.state, a.end_cause) for a in attempts]      # the first launch and 2 relaunches
    assert all(a.end_cause is EndCause.LOST for a in attempts)
    record = store.job(job.id)
    assert record.status is JobStatus.FAILED and record.relaunch_count == 2
    assert live(aws, gcp) == []
    assert store.kinds().count("relaunch-cap") == 1


class _BrokenChannel(ScriptedMonitor):
    """Reading one machine's agent raises (a channel hiccup, a bug in a reader): the others answer."""

    def __init__(self) -> None:
        super().__init__()
        self.broken: set[str] = set()

    def read(self, job, attempt, instance):  # type: ignore[no-untyped-def]
        if instance.instance_id in self.broken:
            raise RuntimeError("report channel broke")
        return super().read(job, attempt, instance)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_an_agent_that_cannot_be_read_stops_no_other_jobs_teardown(backend: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A monitor raising for one machine is that machine's unread report (an error in the tick's report), not
    the end of the tick: another job's ``orch down`` still ends its machine. Before, the exception left the
    sync, so every later step (budgets, teardown, sweep) was skipped on every tick while it lasted, and the
    torn-down job's machine billed on."""
    clock = Clock()
    store = MemoryStore() if backend == "memory" else SqlHarness(open_store(f"sqlite:///{tmp_path / 'o.db'}"),
                                                                 OWNER, catalog=CATALOG)
    aws, gcp = MemoryProvider("aws", CATALOG), MemoryProvider("gcp", CATALOG)
    monitor = _BrokenChannel()
    rec = engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock, monitor=monitor)
    kept = store.add_job(spec(name="kept"), clock())
    gone = store.add_job(spec(name="gone"), clock())
    rec.tick()
    clock.advance(seconds=30)
    rec.tick()                                          # both started: their agents are read from now on
    by_job = {a.job_id: a.instance_id for j in (kept, gone) for a in store.attempts_for_job(j.id)}
    assert all(by_job.values())
    monitor.broken.add(str(by_job[kept.id]))
    store.request_down(gone.id)
    clock.advance(seconds=30)
    report = rec.tick()
    assert [i.instance_id for i in live(aws, gcp)] == [by_job[kept.id]]
    assert any("report channel broke" in e for e in report.errors)
    assert store.attempts_for_job(kept.id)[0].state is AttemptState.RUNNING


def test_an_idle_window_holds_across_restarts(world) -> None:  # type: ignore[no-untyped-def]
    """A machine idle for its whole window is ended though the daemon restarted (a crash loop, a deploy, a job
    moved to another daemon) more often than the window: the new engine reads the utilization the store kept.
    Before, the window started over with every process, so a daemon restarted every 4 minutes never ended a
    machine idle for a 10-minute window."""
    clock, store, aws, gcp, monitor, rec = world
    store.add_job(spec(idle=IdlePolicy(min_gpu_util_pct=5, window=timedelta(minutes=10))), clock())
    rec.tick()
    [inst] = live(aws, gcp)
    monitor.reports[inst.instance_id] = AgentReport(gpu_util_pct=(2.0,) * 8)
    for minute in range(1, 21):
        if minute % 4 == 0:
            rec = engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock, monitor=monitor)    # a new process
        clock.advance(minutes=1)
        rec.tick()
        if not live(aws, gcp):
            break
    assert live(aws, gcp) == [], "an idle machine outlived four windows"
    # Read first at minute 2 (the tick after its start): idle at minute 12, or 13 where the stored readings (one
    # per minute, stamped at its last second) are what the new process knows of the window's first minute.
    assert 12 <= minute <= 13, minute
    assert "idle-shutdown" in store.kinds()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_live_machine_on_a_provider_no_longer_configured_is_reported_every_tick(backend: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A provider taken out of the config while orch has a machine on it: orch can neither see nor end that
    machine (nor tear its job down), and it bills on. Each tick says so in its errors, never "quiet". Before,
    the attempt was skipped without a word, every tick, also after the job was torn down."""
    clock = Clock()
    store = MemoryStore() if backend == "memory" else SqlHarness(open_store(f"sqlite:///{tmp_path / 'o.db'}"),
                                                                 OWNER, catalog=CATALOG)
    aws, gcp = MemoryProvider("aws", CATALOG), MemoryProvider("gcp", CATALOG)
    job = store.add_job(spec(plan=PlanRequest(gpus=("A100-80G",), count=8, providers_allow=("gcp",))), clock())
    engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock).tick()
    [inst] = live(gcp)
    rec = engine(store, {"aws": aws}, CATALOG, clock)         # gcp taken out of the config
    for down in (False, True):
        if down:
            store.request_down(job.id)
        clock.advance(seconds=30)
        report = rec.tick()
        assert not report.quiet or report.errors
        [said] = [e for e in report.errors if e.startswith("gcp:")]
        assert "not configured" in said and "1 live attempt" in said, said
    assert live(gcp) == [inst]                              # nobody could end it: said, not hidden


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_machine_billing_on_after_its_attempt_ended_is_charged_once_for_each_minute(backend: str,
                                                                                     tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A node that never reports is ended at its boot timeout (FAILED at once) while its cloud refuses the
    terminate for a while: the job is charged for the whole time the cloud listed the machine running, each
    minute once. Its stretch not settled yet as a live attempt (a quiet machine's meter is settled every few
    minutes) is charged once: not again as a straggler's in the tick it ended."""
    clock = Clock()
    store = MemoryStore() if backend == "memory" else SqlHarness(open_store(f"sqlite:///{tmp_path / 'o.db'}"),
                                                                 OWNER, catalog=CATALOG)
    aws, gcp = MemoryProvider("aws", CATALOG), MemoryProvider("gcp", CATALOG)
    rec = engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock,
                 settings=ServiceSettings(boot_timeout=timedelta(minutes=13)))
    job = store.add_job(spec(max_relaunches=0), clock())
    start = clock()
    rec.tick()
    aws.fail("terminate", *[InvalidRequestError("refused", provider="aws")] * 1000)
    while "boot-timeout" not in store.kinds():
        assert clock() - start < timedelta(minutes=30)
        clock.advance(minutes=1)
        rec.tick()
    for _ in range(5):                                   # the cloud refuses the terminate: the machine bills on
        clock.advance(minutes=1)
        rec.tick()
    aws.cloud.fail_next["terminate"].clear()
    clock.advance(minutes=1)
    rec.tick()                                           # listed running at this tick's start; ended in it
    assert live(aws, gcp) == []
    assert store.job(job.id).spent_usd == pytest.approx(10.0 * (clock() - start).total_seconds() / 3600)


def test_a_straggler_is_not_charged_again_for_what_its_live_meter_charges() -> None:
    """A quiet machine's meter is settled every few minutes: ended between two settles (a relaunch request
    here) while its cloud refuses the terminate, its last stretch as a live attempt is charged once, not by its
    closing meter and again as a straggler's: the charges of one attempt never overlap."""
    from orchestrator.engine.values import RelaunchRequest

    clock, store = Clock(), MemoryStore()
    aws, gcp = MemoryProvider("aws", CATALOG), MemoryProvider("gcp", CATALOG)
    rec = engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock, settings=ServiceSettings(
        boot_timeout=timedelta(hours=5), heartbeat_timeout=timedelta(hours=5)))
    job = store.add_job(spec(), clock())
    rec.tick()
    [first] = store.attempts_for_job(job.id)
    for _ in range(9):
        clock.advance(minutes=1)
        rec.tick()
    aws.fail("terminate", *[InvalidRequestError("refused", provider="aws")] * 1000)
    store.relaunch_requests_made.append(RelaunchRequest(1, job.id, "train", clock(), "console"))
    for _ in range(3):
        clock.advance(minutes=1)
        rec.tick()
    spans = sorted((since, until) for a, since, until, _, _ in store.charges if a == first.id)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    assert spans[-1][1] == clock()                      # still billing, still charged


def idle_on_stop_until(world, kind: str):  # type: ignore[no-untyped-def]
    """A job with ``idle.action: stop`` on one machine whose GPUs sit at 2%, ticked a minute at a time until the
    store holds an event of ``kind`` (the idle rule's ask or its stop); the job."""
    from orchestrator.engine.idle_rule import IdleAction

    clock, store, aws, gcp, monitor, rec = world
    job = store.add_job(spec(idle=IdlePolicy(min_gpu_util_pct=5, window=timedelta(minutes=10),
                                             action=IdleAction.STOP)), clock())
    rec.tick()
    [inst] = live(aws, gcp)
    monitor.reports[inst.instance_id] = AgentReport(gpu_util_pct=(2.0,) * 8)
    while kind not in store.kinds():
        assert clock().minute < 30
        clock.advance(minutes=1)
        rec.tick()
    return job


def _stop_when_idle(world):  # type: ignore[no-untyped-def]
    """The idle rule's stop, done (the tick of its idle-shutdown event); the job."""
    return idle_on_stop_until(world, "idle-shutdown")


def test_a_machine_stopped_when_idle_stays_stopped(world) -> None:  # type: ignore[no-untyped-def]
    """``idle.action: stop`` keeps the disk: the machine is stopped, never terminated. Before, the same tick's
    sweep read the tick's listing (taken before the stop: running) and terminated the machine it had just
    stopped, as a straggler of an ended attempt."""
    clock, _, aws, gcp, _, rec = world
    _stop_when_idle(world)
    for _ in range(3):
        clock.advance(minutes=1)
        rec.tick()
    assert [i.state for i in live(aws, gcp)] == [InstanceState.STOPPED]
    assert aws.cloud.calls["terminate"] == 0


def test_a_machine_stopped_when_idle_is_ended_once_its_job_is_torn_down(world) -> None:  # type: ignore[no-untyped-def]
    """The stopped machine (its disk bills) is kept for its job; once the job is torn down (``orch down``,
    pruned) nothing wants that disk and the sweep ends the machine. Before, it was kept, and billed, for good."""
    clock, store, aws, gcp, _, rec = world
    job = _stop_when_idle(world)
    clock.advance(minutes=1)
    rec.tick()
    assert [i.state for i in live(aws, gcp)] == [InstanceState.STOPPED]
    store.request_down(job.id)
    for _ in range(2):
        clock.advance(minutes=1)
        rec.tick()
    assert live(aws, gcp) == []


@pytest.mark.parametrize("count_before", [0, 10])
def test_a_lost_machine_a_crash_left_undecided_counts_as_a_relaunch(world, count_before: int) -> None:  # type: ignore[no-untyped-def]
    """Killed after the sync wrote a lost machine (an on-demand one vanished), before the recovery decided: the
    next process relaunches the job and counts it, and at ``max_relaunches`` fails it, as the recovery would
    have (the cap holds across a crash). Before, the job was relaunched from PENDING uncounted."""
    clock, store, _aws, _gcp, _, rec = world
    job = store.add_job(spec(), clock())
    settle(rec, clock)
    for _ in range(count_before):
        store.set_job_status(job.id, store.job(job.id).status, clock(), relaunched=True)
    [attempt] = store.attempts_for_job(job.id)
    store.set_attempt_state(attempt.id, AttemptState.FAILED, clock(), reason="killed mid-tick", cause=EndCause.LOST)
    clock.advance(seconds=30)
    rec.tick()
    fresh = store.job(job.id)
    if count_before < fresh.spec.max_relaunches:
        assert fresh.relaunch_count == count_before + 1 and len(store.attempts_for_job(job.id)) == 2
    else:
        assert fresh.status is JobStatus.FAILED and "relaunch-cap" in store.kinds()
        assert len(store.attempts_for_job(job.id)) == 1


def test_a_budget_reached_while_the_jobs_cloud_cannot_be_listed_stops_it_once_when_it_answers() -> None:
    """A job's budget reached (here: lowered under its spend) while its cloud's listing fails: its machine
    cannot be seen or ended, so the stop waits for the listing, then happens once (one ``budget-stop`` event,
    an alert). Before, every tick of the outage wrote the event again and set the job STOPPED while its
    machine ran on."""
    clock, store = Clock(), MemoryStore()
    aws, gcp = MemoryProvider("aws", CATALOG), MemoryProvider("gcp", CATALOG)
    rec = engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock, monitor=ReportingMonitor())
    job = store.add_job(spec(budget_usd=100.0), clock())
    rec.tick()
    for _ in range(4):
        clock.advance(minutes=15)
        rec.tick()
    assert 0 < store.job(job.id).spent_usd < 100
    record = store.jobs[job.id]
    store.jobs[job.id] = replace(record, spec=replace(record.spec, budget_usd=1.0))     # applied lower
    aws.fail("list_instances", *[InvalidRequestError("down", provider="aws")] * 5)
    for _ in range(5):
        clock.advance(seconds=30)
        rec.tick()
    assert store.kinds().count("budget-stop") == 0 and len(live(aws, gcp)) == 1
    clock.advance(seconds=30)
    rec.tick()                                      # the cloud answers: stopped, once
    clock.advance(seconds=30)
    rec.tick()
    assert store.kinds().count("budget-stop") == 1
    assert live(aws, gcp) == [] and store.job(job.id).status is JobStatus.STOPPED


def test_a_straggler_whose_accepted_terminate_left_it_running_is_asked_again() -> None:
    """A cloud may answer a terminate and leave the machine running (a request it dropped): the sweep asks
    again while the machine is still listed billing, after ``STRAGGLER_ASK_AGAIN``, never every tick. Before,
    a straggler was asked once per process, so that machine billed on until the daemon restarted."""
    from orchestrator.engine.sweep import STRAGGLER_ASK_AGAIN

    clock, store = Clock(), MemoryStore()
    aws, gcp = MemoryProvider("aws", CATALOG), MemoryProvider("gcp", CATALOG)
    rec = engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock,
                 settings=ServiceSettings(boot_timeout=timedelta(minutes=5)))
    store.add_job(spec(max_relaunches=0), clock())
    rec.tick()
    assert len(live(aws, gcp)) == 1
    real_terminate, dropped = aws.terminate, [0]

    def drops_the_first_two(instance_id: str) -> None:
        if dropped[0] < 2:
            dropped[0] += 1         # answered, not carried out
            return
        real_terminate(instance_id)

    aws.terminate = drops_the_first_two  # type: ignore[method-assign]
    while "boot-timeout" not in store.kinds():
        assert clock().minute < 30
        clock.advance(minutes=1)
        rec.tick()
    ended_at = clock()
    while live(aws, gcp):
        assert clock() - ended_at <= STRAGGLER_ASK_AGAIN + timedelta(minutes=2), "never asked again"
        clock.advance(minutes=1)
        rec.tick()
    assert dropped[0] == 2 and clock() - ended_at > STRAGGLER_ASK_AGAIN - timedelta(minutes=1)
