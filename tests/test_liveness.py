"""Nothing bills without a live job: the liveness deadlines (orchestrator/engine/liveness.py) against the
Vast.ai and Lambda wire fakes (real adapters over HTTP on 127.0.0.1), a SQLite store, a fake clock and a
scripted monitor whose agent heartbeat the test moves on, or not.

* a node whose agent never reports is ended after ``boot_timeout``; the job runs on the next offer;
* an agent that goes silent (its heartbeat stops moving, or it cannot be read at all) is a lost node: the
  job recovers from its last committed checkpoint;
* Vast's ``offline``/``unknown`` (UNREACHABLE) is not lost within ``unreachable_grace``, and is after it;
* the marks survive a restarted daemon; the manifest's own deadlines win over the daemon's.

In every case no machine is left running but the job's one live attempt (``check_invariants``).
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import pytest

from orchestrator.daemon.assembly import Service, ServiceSettings
from orchestrator.engine.events import EventKind
from orchestrator.engine.hooks import AgentReport, NoMonitor
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.store import repo
from tests.daemon_world import (
    PUBLIC_KEY,
    Clock,
    Fakes,
    ScriptedMonitor,
    add_job,
    check_invariants,
    service_for,
)

BOOT = timedelta(minutes=20)
HEARTBEAT = timedelta(minutes=10)
GRACE = timedelta(minutes=10)
SETTINGS = ServiceSettings(orphan_grace=timedelta(0), ssh_public_key=PUBLIC_KEY, boot_timeout=BOOT,
                           heartbeat_timeout=HEARTBEAT, unreachable_grace=GRACE)
TICK = timedelta(seconds=30)


class Agent(ScriptedMonitor):
    """The nodes' agents: ``beat(id)`` moves an agent's heartbeat on (to the engine's clock: the engine never
    compares it with its own, only whether it moved); an id with no report is unreadable."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    def beat(self, instance_id: str, **kw: object) -> None:
        self.reports[instance_id] = AgentReport(heartbeat_at=self.clock(), **kw)  # type: ignore[arg-type]


@pytest.fixture
def world(fakes: Fakes, tmp_path):  # type: ignore[no-untyped-def]
    clock = Clock()
    agent = Agent(clock)
    url = f"sqlite:///{tmp_path / 'orch.db'}"
    service = service_for(fakes, url, clock=clock, monitor=agent, settings=SETTINGS)
    yield fakes, service, clock, agent, url
    service.close()


def tick(service: Service, clock: Clock, agent: Agent | None = None, beating: tuple[str, ...] = ()) -> None:
    clock.advance(seconds=TICK.total_seconds())
    if agent is not None:
        for iid in beating:
            agent.beat(iid)
    service.reconciler.tick()


def ticks_for(span: timedelta) -> int:
    return int(span / TICK)


def history(service: Service, job: int):  # type: ignore[no-untyped-def]
    return list(service.engine_store.attempts_for_job(job))


def kinds(service: Service) -> list[str]:
    assert service.store is not None
    with service.store.transaction() as tx:
        return [e.kind for e in repo.list_events(tx)]


def test_a_node_that_never_reports_is_ended_after_boot_timeout_and_the_job_runs_elsewhere(world) -> None:  # type: ignore[no-untyped-def]
    fakes, service, clock, agent, _ = world
    job = add_job(service.store, "train")
    service.reconciler.tick()
    [_vast] = fakes.live_instances()["vastai"]
    for _ in range(ticks_for(BOOT) - 1):         # silent, but not yet past the boot timeout
        tick(service, clock)
    assert fakes.live_instances()["vastai"] != [] and history(service, job)[0].state.is_live

    tick(service, clock)                         # boot timeout reached
    first, second = history(service, job)
    assert first.state is AttemptState.FAILED and first.end_cause is EndCause.BOOT_TIMEOUT
    assert fakes.live_instances()["vastai"] == []                  # ended, not left billing
    assert [i.provider for i in fakes.live_instances()["lambda"]] == ["lambda"]
    assert second.offer.provider == "lambda" and second.state.is_live
    assert "boot-timeout" in kinds(service) and "recovering" in kinds(service)
    assert service.engine_store.job(job).relaunch_count == 1

    [lam] = fakes.live_instances()["lambda"]
    for _ in range(ticks_for(BOOT) + 2):         # this one's agent reports: it keeps running
        tick(service, clock, agent, beating=(lam.instance_id,))
    assert history(service, job)[-1].state is AttemptState.RUNNING
    assert service.engine_store.job(job).status is JobStatus.RUNNING
    check_invariants(fakes, service.store)


@pytest.mark.parametrize("silence", ["heartbeat-stops", "unreadable"])
def test_a_silent_agent_is_a_lost_node_recovered_from_its_checkpoint(world, silence: str) -> None:  # type: ignore[no-untyped-def]
    fakes, service, clock, agent, _ = world
    job = add_job(service.store, "train")
    service.reconciler.tick()
    [vast] = fakes.live_instances()["vastai"]
    ckpt = (("s3://ckpt/train/step-40", 40),)
    for _ in range(ticks_for(BOOT) * 2):         # reporting well past the boot timeout: nothing happens
        clock.advance(seconds=TICK.total_seconds())
        agent.beat(vast.instance_id, checkpoints=ckpt)
        service.reconciler.tick()
    assert history(service, job)[0].state is AttemptState.RUNNING

    if silence == "unreadable":
        del agent.reports[vast.instance_id]       # the agent's channel answers no more
    for _ in range(ticks_for(HEARTBEAT) - 1):    # the heartbeat no longer moves
        tick(service, clock)
    assert history(service, job)[0].state is AttemptState.RUNNING

    tick(service, clock)
    first, second = history(service, job)
    assert first.state is AttemptState.FAILED and first.end_cause is EndCause.SILENT
    assert second.checkpoint_restored == "s3://ckpt/train/step-40"
    assert second.offer.provider == "lambda"     # the lost node's place cools like a preempted zone
    assert fakes.live_instances()["vastai"] == []
    assert "node-silent" in kinds(service)
    check_invariants(fakes, service.store)


def _vast_status(fakes: Fakes, instance_id: str, status: str) -> None:
    with fakes.vast.lock:
        fakes.vast.state.instances[int(instance_id)].update(actual_status=status)


@pytest.mark.parametrize("status", ["offline", "unknown"])
def test_vast_unreachable_is_not_lost_within_the_grace_and_is_after_it(world, status: str) -> None:  # type: ignore[no-untyped-def]
    fakes, service, clock, agent, _ = world
    job = add_job(service.store, "train")
    service.reconciler.tick()
    [vast] = fakes.live_instances()["vastai"]
    for _ in range(4):
        tick(service, clock, agent, beating=(vast.instance_id,))
    _vast_status(fakes, vast.instance_id, status)
    for _ in range(ticks_for(GRACE) - 1):        # within the grace: kept, not recovered, no relaunch
        tick(service, clock, agent, beating=(vast.instance_id,))
    assert [a.state for a in history(service, job)] == [AttemptState.RUNNING]
    assert fakes.live_instances()["lambda"] == []

    _vast_status(fakes, vast.instance_id, "running")   # back within the grace: the count starts over
    tick(service, clock, agent, beating=(vast.instance_id,))
    _vast_status(fakes, vast.instance_id, status)
    for _ in range(ticks_for(GRACE)):            # first seen at the first of these; 9.5 min at the last
        tick(service, clock, agent, beating=(vast.instance_id,))
    assert [a.state for a in history(service, job)] == [AttemptState.RUNNING]

    tick(service, clock, agent, beating=(vast.instance_id,))     # past the grace: lost
    first, second = history(service, job)
    assert first.end_cause is EndCause.UNREACHABLE and second.offer.provider == "lambda"
    assert fakes.live_instances()["vastai"] == []
    check_invariants(fakes, service.store)


def test_a_machine_stopped_outside_orch_is_lost_after_the_grace(world) -> None:  # type: ignore[no-untyped-def]
    """A holding attempt whose machine the cloud lists STOPPED with no stop of orch's (Vast ``frozen``; a stop by
    hand) is not left RUNNING forever: within the grace it is kept (it may start again), past it the node is lost
    (``EndCause.LOST``, a ``stopped-outside`` event), the stopped machine ended and the job relaunched."""
    fakes, service, clock, agent, _ = world
    job = add_job(service.store, "train")
    service.reconciler.tick()
    [vast] = fakes.live_instances()["vastai"]
    for _ in range(4):
        tick(service, clock, agent, beating=(vast.instance_id,))
    _vast_status(fakes, vast.instance_id, "frozen")
    for _ in range(ticks_for(GRACE)):           # within the grace (its agent quiet, as on a stopped machine)
        tick(service, clock, agent)
    assert [a.state for a in history(service, job)] == [AttemptState.RUNNING]
    assert fakes.live_instances()["lambda"] == []

    tick(service, clock, agent)                 # past the grace: lost, recovered on a new machine
    first, second = history(service, job)
    assert (first.state, first.end_cause) == (AttemptState.FAILED, EndCause.LOST)
    assert second.state.is_live and second.instance_id != vast.instance_id
    assert EventKind.STOPPED_OUTSIDE in kinds(service)
    live = [i.instance_id for insts in fakes.live_instances().values() for i in insts]
    assert vast.instance_id not in live and len(live) == 1          # the stopped one ended, one replacement
    check_invariants(fakes, service.store)


def test_the_marks_survive_a_restart_and_the_manifest_wins(fakes: Fakes, tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    agent = Agent(clock)
    url = f"sqlite:///{tmp_path / 'orch.db'}"
    first = service_for(fakes, url, clock=clock, monitor=agent, settings=SETTINGS)
    job = add_job(first.store, "train")
    assert first.store is not None
    with first.store.transaction() as tx:      # the manifest's own heartbeat timeout: 3 minutes
        row = repo.require_job(tx, "train")
        row.manifest = {**row.manifest, "policies": {**row.manifest["policies"], "heartbeat_timeout": "3m"}}
        row.manifest_hash = "h-3m"
        tx.add(row)
    first.reconciler.tick()
    [vast] = fakes.live_instances()["vastai"]
    for _ in range(3):
        tick(first, clock, agent, beating=(vast.instance_id,))
    last_beat = clock()
    first.close()

    # A new daemon: it knows the node was heard (so silence, not a boot failure, is what can end it), and when:
    # the deadline counts from the stored mark, not from its own first tick.
    second = service_for(fakes, url, clock=clock, monitor=agent, settings=SETTINGS)
    try:
        for _ in range(ticks_for(timedelta(minutes=3)) - 1):   # within 3 min of the last heartbeat
            tick(second, clock)
        assert history(second, job)[0].state is AttemptState.RUNNING
        tick(second, clock)
        lost = history(second, job)[0]
        assert lost.end_cause is EndCause.SILENT, lost
        assert clock() - last_beat == timedelta(minutes=3)
        check_invariants(fakes, second.store)
    finally:
        second.close()


def test_a_silent_node_is_ended_at_its_deadline_with_the_daemon_restarted_every_minute(fakes: Fakes,
                                                                                      tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A new daemon every 60 s (two ticks) over the same store, as under a crash loop or ``orch tick`` from
    cron: the agent beats for 4 minutes and goes silent; its node ends at last heartbeat + timeout, within a
    tick (the stored mark lags the last heartbeat by a minute here: the heartbeat's advance covers it)."""
    clock = Clock()
    agent = Agent(clock)
    url = f"sqlite:///{tmp_path / 'orch.db'}"
    service = service_for(fakes, url, clock=clock, monitor=agent, settings=SETTINGS)
    job = add_job(service.store, "train")
    service.reconciler.tick()
    [vast] = fakes.live_instances()["vastai"]
    last_beat = clock()
    try:
        for i in range(ticks_for(timedelta(minutes=30))):
            if i % 2 == 0:
                service.close()
                service = service_for(fakes, url, clock=clock, monitor=agent, settings=SETTINGS)
            beating = (vast.instance_id,) if i < 8 else ()
            tick(service, clock, agent, beating)
            if beating:
                last_beat = clock()
            if history(service, job)[0].state.is_final:
                break
        lost = history(service, job)[0]
        assert lost.end_cause is EndCause.SILENT, lost
        assert lost.heard_at is not None and lost.heard_at < last_beat    # the stored mark lagged
        assert last_beat + HEARTBEAT <= clock() < last_beat + HEARTBEAT + TICK
        check_invariants(fakes, service.store)
    finally:
        service.close()


def test_a_daemon_back_after_a_long_outage_ends_no_live_node(fakes: Fakes, tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    agent = Agent(clock)
    url = f"sqlite:///{tmp_path / 'orch.db'}"
    first = service_for(fakes, url, clock=clock, monitor=agent, settings=SETTINGS)
    job = add_job(first.store, "train")
    first.reconciler.tick()
    [vast] = fakes.live_instances()["vastai"]
    for _ in range(3):
        tick(first, clock, agent, beating=(vast.instance_id,))
    first.close()
    clock.now += timedelta(hours=2)              # the daemon was down far longer than any deadline
    second = service_for(fakes, url, clock=clock, monitor=agent, settings=SETTINGS)
    try:
        for _ in range(ticks_for(BOOT) + 2):
            tick(second, clock, agent, beating=(vast.instance_id,))
        assert [a.state for a in history(second, job)] == [AttemptState.RUNNING]
    finally:
        second.close()


def test_without_a_monitor_no_agent_deadline_applies(fakes: Fakes, tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    service = service_for(fakes, f"sqlite:///{tmp_path / 'orch.db'}", clock=clock, monitor=NoMonitor(),
                          settings=SETTINGS)
    try:
        job = add_job(service.store, "train")
        service.reconciler.tick()
        for _ in range(ticks_for(BOOT + HEARTBEAT) + 2):
            tick(service, clock)
        assert [a.state for a in history(service, job)] == [AttemptState.RUNNING]
    finally:
        service.close()


def test_heard_at_is_written_at_most_every_quarter_timeout(world) -> None:  # type: ignore[no-untyped-def]
    fakes, service, clock, agent, _ = world
    job = add_job(service.store, "train")
    service.reconciler.tick()
    [vast] = fakes.live_instances()["vastai"]
    marks: list[datetime | None] = []
    for _ in range(ticks_for(HEARTBEAT)):
        tick(service, clock, agent, beating=(vast.instance_id,))
        marks.append(history(service, job)[0].heard_at)
    distinct = sorted({m for m in marks if m is not None})
    assert len(distinct) == 4, distinct          # the first report, then every 2.5 min over 10 min
    assert all(b - a >= HEARTBEAT / 4 for a, b in itertools.pairwise(distinct))


def test_the_deadlines_come_from_the_config_and_its_env(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config
    from orchestrator.daemon.assembly import load_service_settings

    path = tmp_path / "config.yaml"
    path.write_text("daemon: {boot_timeout_s: 900, heartbeat_timeout_s: 120}\n")
    monkeypatch.setenv("ORCH_UNREACHABLE_GRACE_S", "45")
    got = load_service_settings(load_config(path))
    assert (got.boot_timeout, got.heartbeat_timeout, got.unreachable_grace) == (
        timedelta(seconds=900), timedelta(seconds=120), timedelta(seconds=45))
    assert ServiceSettings().boot_timeout == timedelta(minutes=20)
    monkeypatch.setenv("ORCH_HEARTBEAT_TIMEOUT_S", "soon")
    with pytest.raises(ConfigError, match="heartbeat_timeout_s"):
        load_service_settings(load_config(path))


def test_a_silent_node_of_a_gang_restarts_the_whole_gang_elsewhere(engine_world) -> None:  # type: ignore[no-untyped-def]
    """test_engine's world (memory and SQLite stores, in-memory clouds): node 1 of a 2-node gang goes silent;
    the gang ends (node 0 as ``gang``) and starts again, both nodes, in another zone."""
    from dataclasses import replace

    from tests.test_engine import live, settle, spec

    clock, store, aws, gcp, monitor, rec = engine_world
    job = store.add_job(spec(plan=replace(spec().plan, nodes=2)), clock())
    rec.tick()
    settle(rec, clock)
    first = [a for a in store.attempts_for_job(job.id) if a.state is AttemptState.RUNNING]
    assert sorted(a.node_rank for a in first) == [0, 1]
    by_rank = {a.node_rank: next(i for i in live(aws, gcp) if i.launch_id == a.launch_id) for a in first}
    for minute in range(12):
        clock.advance(minutes=1)
        monitor.reports[by_rank[0].instance_id] = AgentReport(heartbeat_at=clock())   # node 0 keeps beating
        if minute < 2:
            monitor.reports[by_rank[1].instance_id] = AgentReport(heartbeat_at=clock())
        rec.tick()
    ended = {a.node_rank: a for a in store.attempts_for_job(job.id) if a.generation == first[0].generation}
    assert ended[1].end_cause is EndCause.SILENT and ended[0].end_cause is EndCause.GANG
    second = [a for a in store.attempts_for_job(job.id) if a.generation > first[0].generation]
    assert sorted(a.node_rank for a in second) == [0, 1] and all(a.state.is_live for a in second)
    assert second[0].offer.zone != first[0].offer.zone          # the lost node's zone cools
    assert {i.launch_id for i in live(aws, gcp)} == {a.launch_id for a in second}


@pytest.fixture(params=["memory", "sqlite"])
def engine_world(request, tmp_path):  # type: ignore[no-untyped-def]
    from tests.fakes.memory_provider import MemoryProvider
    from tests.fakes.memory_store import MemoryStore
    from tests.test_engine import CATALOG, OWNER, SqlHarness, engine
    from tests.test_engine import Clock as EngineClock
    from tests.test_engine import ScriptedMonitor as EngineMonitor

    clock = EngineClock()
    if request.param == "memory":
        store = MemoryStore()
    else:
        from orchestrator.store import open_store

        store = SqlHarness(open_store(f"sqlite:///{tmp_path / 'orch.db'}"), OWNER, catalog=CATALOG)
    aws, gcp = MemoryProvider("aws", CATALOG), MemoryProvider("gcp", CATALOG)
    monitor = EngineMonitor()
    rec = engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock, monitor=monitor)
    return clock, store, aws, gcp, monitor, rec


def test_a_node_that_never_reports_is_relaunched_at_most_max_relaunches_times(world) -> None:  # type: ignore[no-untyped-def]
    """``max_relaunches: 3`` and no agent ever reports: exactly 4 launches (each ended at its boot timeout, its
    place backed off), then the job is failed with one ``relaunch-cap`` event, which alerts."""
    from orchestrator.alerts.model import AlertKind
    from orchestrator.daemon.alert_events import AlertMapper
    from orchestrator.store.listen import CommittedEvent

    fakes, service, clock, _agent, _ = world
    job = add_job(service.store, "train")
    with service.store.transaction() as tx:
        row = repo.require_job(tx, "train")
        row.manifest = {**row.manifest, "policies": {**row.manifest["policies"], "max_relaunches": 3}}
        row.manifest_hash = "h-cap"
        tx.add(row)
    # Tick until the job is failed, then on until no place of its attempts is cooling any more (the engine's own
    # backed-off cool-downs): past that, an engine that still relaunched a failed job would have done so. The
    # whole run is bounded by the six hours this test used to tick through blindly.
    from orchestrator.engine.recovery_facts import cooled_places

    spec = service.engine_store.job(job).spec
    for _ in range(ticks_for(timedelta(hours=6))):
        tick(service, clock)
        if (service.engine_store.job(job).status is JobStatus.FAILED
                and not cooled_places(history(service, job), clock(), spec.cooldown)):
            break
    for _ in range(2):                          # the places free again: one tick would relaunch; two, to be sure
        tick(service, clock)
    attempts = history(service, job)
    assert len(attempts) == 4, [(a.offer.provider, a.end_cause) for a in attempts]
    assert all(a.end_cause is EndCause.BOOT_TIMEOUT for a in attempts)
    billed = sum(((a.ended_at or clock()) - (a.created_at or clock()) for a in attempts), timedelta())
    assert billed <= 4 * BOOT, billed
    record = service.engine_store.job(job)
    assert record.status is JobStatus.FAILED and record.relaunch_count == 3
    assert fakes.live_instances() == {"vastai": [], "lambda": []}
    assert service.store is not None
    with service.store.transaction() as tx:
        capped = [e for e in repo.list_events(tx) if e.kind == "relaunch-cap"]
    assert len(capped) == 1 and "max relaunches (3) reached" in capped[0].message
    alert = AlertMapper().alert_for(CommittedEvent(1, clock(), EventKind(capped[0].kind), job, "train", None,
                                                   capped[0].message, {}))
    assert alert is not None and alert.kind is AlertKind.RELAUNCH_CAP
