"""The daemon's engine in process, built by orchestrator.daemon.assembly, against the Vast.ai and Lambda wire fakes
(real adapters over HTTP on 127.0.0.1), a SQLite store and an injected clock: preemption and recovery,
Vast outbid, idle shutdown, provider faults, the notice-to-replacement latency, and /metrics."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import httpx
import pytest

from orchestrator.daemon.assembly import Service, ServiceSettings
from orchestrator.engine.hooks import AgentReport
from orchestrator.engine.notices import NoticeKind
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.store import repo
from tests.daemon_world import (
    OWNER,
    PUBLIC_KEY,
    Clock,
    Fakes,
    ScriptedMonitor,
    add_job,
    check_invariants,
    service_for,
    store_view,
)
from tests.test_engine import notice


@pytest.fixture
def world(fakes: Fakes, tmp_path):  # type: ignore[no-untyped-def]
    clock, monitor = Clock(), ScriptedMonitor()
    service = service_for(fakes, f"sqlite:///{tmp_path / 'orch.db'}", clock=clock, monitor=monitor)
    yield fakes, service, clock, monitor
    service.close()


def until_quiet(service: Service, clock: Clock, limit: int = 12, step_s: float = 30) -> None:
    for _ in range(limit):
        clock.advance(seconds=step_s)
        report = service.reconciler.tick()
        if report.quiet and not report.errors:
            return
    raise AssertionError(f"not quiet after {limit} ticks: {report}")


def attempts(service: Service, job_id: int):  # type: ignore[no-untyped-def]
    return list(service.engine_store.attempts_for_job(job_id))


def test_outbid_spot_is_preemption_destroyed_and_relaunched_elsewhere_from_the_checkpoint(world) -> None:  # type: ignore[no-untyped-def]
    fakes, service, clock, _ = world
    job = add_job(service.store, "train")
    until_quiet(service, clock)
    [first] = fakes.live_instances()["vastai"]
    assert fakes.live_instances()["lambda"] == []
    assert service.engine_store.job(job).status is JobStatus.RUNNING
    service.engine_store.record_checkpoint(job, attempts(service, job)[0].id, "s3://ckpt/train/step-40", 40, clock())

    fakes.vast.outbid(first.instance_id)        # Vast stops an outbid interruptible: that is a preemption
    clock.advance(seconds=30)
    report = service.reconciler.tick()
    assert report.preempted == 1 and report.relaunched == 1
    assert fakes.live_instances()["vastai"] == []                 # the stopped (disk-billing) one is destroyed
    assert [r.method for r in fakes.vast.requests if r.path.endswith(f"/instances/{first.instance_id}")
            ].count("DELETE") >= 1
    [second] = fakes.live_instances()["lambda"]
    history = attempts(service, job)
    assert [a.state for a in history] == [AttemptState.PREEMPTED, AttemptState.LAUNCHED]
    assert history[-1].checkpoint_restored == "s3://ckpt/train/step-40"
    assert history[-1].launch_id == second.launch_id
    until_quiet(service, clock)
    assert service.engine_store.job(job).status is JobStatus.RUNNING
    assert service.engine_store.job(job).relaunch_count == 1
    check_invariants(fakes, service.store)


def test_the_preempted_zone_stays_out_for_the_cooldown_even_after_a_failed_relaunch(world) -> None:  # type: ignore[no-untyped-def]
    fakes, service, clock, _ = world
    job = add_job(service.store, "train", cooldown="30m")
    until_quiet(service, clock)
    [first] = fakes.live_instances()["vastai"]
    fakes.vast.outbid(first.instance_id)
    fakes.lam.faults.arm("capacity", 1)        # the replacement's first try is refused
    clock.advance(seconds=30)
    service.reconciler.tick()
    # Bavaria's ask is back on the market and still the cheapest, but it is inside the cool-down: the
    # job, pending again after the refusal, is retried on Lambda only.
    assert fakes.live_instances()["vastai"] == []
    until_quiet(service, clock)
    assert fakes.live_instances()["vastai"] == []
    [replacement] = fakes.live_instances()["lambda"]
    assert attempts(service, job)[-1].launch_id == replacement.launch_id
    check_invariants(fakes, service.store)


def test_a_job_pending_after_the_cooldown_may_use_the_zone_again(world) -> None:  # type: ignore[no-untyped-def]
    fakes, service, clock, _ = world
    add_job(service.store, "train", cooldown="10m")
    until_quiet(service, clock)
    [first] = fakes.live_instances()["vastai"]
    fakes.vast.outbid(first.instance_id)
    fakes.lam.faults.arm("capacity", -1)       # nowhere else to go
    clock.advance(seconds=30)
    service.reconciler.tick()
    for _ in range(3):                        # inside the cool-down: Bavaria is not retried
        clock.advance(minutes=2)
        service.reconciler.tick()
        assert fakes.live_instances()["vastai"] == []
    clock.advance(minutes=10)
    until_quiet(service, clock)
    [again] = fakes.live_instances()["vastai"]
    assert again.instance_id != first.instance_id
    fakes.lam.faults.clear()
    check_invariants(fakes, service.store)


def test_idle_window_terminates_idle_keeps_short_idle_and_busy(world) -> None:  # type: ignore[no-untyped-def]
    fakes, service, clock, monitor = world
    idle = add_job(service.store, "idle-one", providers=["lambda"], idle_pct=5, idle_window="10m")
    busy = add_job(service.store, "busy-one", providers=["lambda"], idle_pct=5, idle_window="10m")
    until_quiet(service, clock)
    by_launch = {a.launch_id: a.job_id for a in store_view(service.store).live_attempts}
    insts = {by_launch[i.launch_id]: i for i in fakes.live_instances()["lambda"]}
    monitor.reports[insts[idle].instance_id] = AgentReport(gpu_util_pct=(2.0,))
    monitor.reports[insts[busy].instance_id] = AgentReport(gpu_util_pct=(2.0, 71.0))
    for _ in range(9):                         # 2% for 9 minutes: less than the window
        clock.advance(minutes=1)
        report = service.reconciler.tick()
        assert report.idle_stopped == 0
    assert len(fakes.live_instances()["lambda"]) == 2
    stopped = 0
    for _ in range(3):                         # past the window
        clock.advance(minutes=1)
        stopped += service.reconciler.tick().idle_stopped
    assert stopped == 1
    [kept] = fakes.live_instances()["lambda"]
    assert kept.instance_id == insts[busy].instance_id
    assert service.engine_store.job(idle).status is JobStatus.STOPPED
    assert service.engine_store.job(busy).status is JobStatus.RUNNING
    with service.store.transaction() as tx:
        assert [e.job_id for e in repo.list_events(tx, kinds=["idle-shutdown"])] == [idle]


def test_orphans_tagged_as_ours_are_terminated_after_the_grace_others_kept(fakes: Fakes, tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    service = service_for(fakes, f"sqlite:///{tmp_path / 'orch.db'}", clock=clock,
                          settings=ServiceSettings(orphan_grace=timedelta(minutes=5), ssh_public_key=PUBLIC_KEY))
    try:
        orphan_vast, orphan_lambda = fakes.plant_orphan("vastai"), fakes.plant_orphan("lambda")
        service.reconciler.tick()
        assert {i.instance_id for v in fakes.live_instances().values() for i in v} == {orphan_vast, orphan_lambda}
        clock.advance(minutes=6)
        report = service.reconciler.tick()
        assert report.orphans_terminated == 2
        assert fakes.live_instances() == {"vastai": [], "lambda": []}
    finally:
        service.close()


FAULTS = {"vastai": ("server-error", "throttle", "capacity", "lost-answer"),
          "lambda": ("server_error", "throttle", "capacity")}


def test_faults_at_20_percent_during_many_ticks_end_with_every_job_running_and_no_leak(world) -> None:  # type: ignore[no-untyped-def]
    fakes, service, clock, _ = world
    rng = random.Random(20261201)
    jobs = [add_job(service.store, f"job-{n}") for n in range(6)]
    injected = 0
    for _ in range(25):
        for name, kinds in FAULTS.items():
            if rng.random() < 0.2:
                kind = rng.choice(kinds)
                injected += 1
                if name == "vastai":
                    fakes.vast.inject(kind, 1)
                else:
                    fakes.lam.faults.arm(kind, 1)
        if rng.random() < 0.2:                # and now and then a preemption of the Vast spot machine
            for inst in fakes.live_instances()["vastai"]:
                fakes.vast.outbid(inst.instance_id)
        clock.advance(seconds=30)
        service.reconciler.tick()
    assert injected >= 5
    with fakes.vast.lock:
        fakes.vast.state.faults.clear()
    fakes.lam.faults.clear()
    until_quiet(service, clock, limit=15)
    for job in jobs:
        assert service.engine_store.job(job).status is JobStatus.RUNNING
    check_invariants(fakes, service.store)


def test_notice_to_replacement_launch_latency(fakes: Fakes, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Real clock: the engine's relaunch_latency metric is the wall time from the notice to the accepted
    replacement launch (the replacement starts during the notice window, on another provider)."""
    monitor = ScriptedMonitor()
    service = service_for(fakes, f"sqlite:///{tmp_path / 'orch.db'}", monitor=monitor)
    try:
        job = add_job(service.store, "train")
        deadline = time.monotonic() + 60                # a hang guard: the ticks decide
        while service.engine_store.job(job).status is not JobStatus.RUNNING:
            assert time.monotonic() < deadline, "never reached running"
            service.reconciler.tick()
        [old] = fakes.live_instances()["vastai"]
        # A kind this orch does not know (Vast's outbid warning) ends the attempt, as a preemption does.
        outbid = notice(NoticeKind.UNKNOWN, cloud="vast")
        monitor.reports[old.instance_id] = AgentReport(gpu_util_pct=(95.0,), notice=outbid)
        started = time.perf_counter()
        report = service.reconciler.tick()
        wall = time.perf_counter() - started
        assert report.preempted == 1 and report.relaunched == 1
        hist = service.metrics.relaunch_latency
        count = service.metrics.registry.get_sample_value("orch_relaunch_latency_seconds_count")
        total = service.metrics.registry.get_sample_value("orch_relaunch_latency_seconds_sum")
        assert count == 1 and total is not None and 0 <= total <= wall
        assert hist is not None
        print(f"\nnotice-to-replacement-launch latency: {total * 1000:.1f} ms (engine metric); "
              f"whole tick {wall * 1000:.1f} ms")
        assert len(fakes.live_instances()["lambda"]) == 1       # the replacement
        assert len(fakes.live_instances()["vastai"]) == 1       # the noticed one drains for its checkpoint
    finally:
        service.close()


def test_metrics_endpoint_serves_jobs_instances_burn_preemptions_latency_idle(world) -> None:  # type: ignore[no-untyped-def]
    fakes, service, clock, monitor = world
    add_job(service.store, "train")
    idle = add_job(service.store, "idle-one", providers=["lambda"], idle_window="5m")
    until_quiet(service, clock)
    [spot] = fakes.live_instances()["vastai"]
    fakes.vast.outbid(spot.instance_id)
    clock.advance(seconds=30)
    service.reconciler.tick()
    by_launch = {a.launch_id: a.job_id for a in store_view(service.store).live_attempts}
    for inst in fakes.live_instances()["lambda"]:
        if by_launch.get(inst.launch_id) == idle:
            monitor.reports[inst.instance_id] = AgentReport(gpu_util_pct=(1.0,))
    for _ in range(8):
        clock.advance(minutes=1)
        service.reconciler.tick()
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    service.metrics.serve(port)
    body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    assert 'orch_jobs{state="running"} 1.0' in body
    assert 'orch_instances{market="on-demand",provider="lambda"} 1.0' in body
    assert "orch_burn_usd_per_hour 1.29" in body
    assert 'orch_preemptions_total{provider="vastai"} 1.0' in body
    assert "orch_relaunch_latency_seconds_count 1.0" in body
    assert 'orch_idle_shutdowns_total{action="terminate"} 1.0' in body
    assert OWNER  # the instances counted are the owner's only (list_instances(owner))
