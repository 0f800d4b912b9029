"""The daemon's recovery runs the simulator's policies: SpotPolicyRecovery on its own, in the engine, in config."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.engine.hooks import AgentReport
from orchestrator.engine.recovery_policy import DefaultRecoveryPolicy, Preemption, RecoveryAction, RecoveryContext
from orchestrator.engine.states import JobStatus
from orchestrator.policy.orch_v1 import OrchV1Policy as OrchPolicy
from orchestrator.policy.policies import UniformProgressPolicy
from orchestrator.policy.recovery import SpotPolicyRecovery, recovery_for
from providers.base import Market
from tests.fakes.memory_provider import MemoryProvider
from tests.fakes.memory_store import MemoryStore
from tests.test_engine import (
    Clock,
    RecordingBootstrapper,
    ReportingMonitor,
    ScriptedMonitor,
    engine,
    live,
    notice,
    offer,
    settle,
    spec,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)
UP = SpotPolicyRecovery(UniformProgressPolicy)


def ctx(hours: float, *, running: float, preempted_in: tuple[str, ...] = ("az1",), **kw: object) -> RecoveryContext:
    """A 10 h job due 20 h after T0, seen ``hours`` after its start; spot place az1 (and what kw adds)."""
    base = RecoveryContext(
        now=T0 + timedelta(hours=hours), relaunch_count=1, max_relaunches=10, markets=frozenset(Market),
        preemptions=[Preemption(T0 + timedelta(hours=hours), "aws", z, "us-east-1") for z in preempted_in],
        cooldown=timedelta(minutes=30), deadline=T0 + timedelta(hours=20), estimated_hours=10.0,
        remaining_hours=10.0 - running, started_at=T0, running_hours=running, spot_places=("az1",),
        spot_price_ratio=0.3)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_ahead_of_the_line_with_no_spot_it_waits_behind_it_it_buys_on_demand() -> None:
    # 1 h in, 1 h run (0.8 h of progress after the restart overhead) vs the line 10 x 1/20 = 0.5 h: wait.
    wait = UP.decide(ctx(1.0, running=1.0))
    assert wait.action is RecoveryAction.WAIT and wait.reason.startswith("uniform-progress: wait for spot")
    # 2 h in, still 0.8 h done vs the line 1.0 h: on-demand, the cooling zone kept out.
    od = UP.decide(ctx(2.0, running=1.0))
    assert (od.action, od.markets, od.exclude_places) == (RecoveryAction.RELAUNCH, frozenset({Market.ON_DEMAND}),
                                                          frozenset({"az1"}))


def test_spot_elsewhere_is_taken_at_once() -> None:
    d = UP.decide(ctx(1.0, running=1.0, spot_places=("az1", "az2")))
    assert (d.action, d.markets) == (RecoveryAction.RELAUNCH, frozenset({Market.SPOT}))


def test_running_spot_is_kept_unless_the_safety_net_fires() -> None:
    keep = UP.decide(ctx(1.0, running=1.0, preempted_in=(), on_spot=True, current_place="az1",
                         current_age_hours=1.0))
    assert keep.action is RecoveryAction.KEEP
    # 10 h of work + one overhead = 10.2 h, and 10.2 h to the deadline, on a spot machine still in its
    # overhead: a preemption would miss the deadline, so Uniform Progress's safety net moves it to on-demand.
    tight = ctx(0.05, running=0.05, preempted_in=(), on_spot=True, current_place="az1", current_age_hours=0.05,
                deadline=T0 + timedelta(hours=10.25))
    move = UP.decide(tight)
    assert (move.action, move.markets) == (RecoveryAction.RELAUNCH, frozenset({Market.ON_DEMAND}))


def test_jobs_without_deadline_or_estimate_get_the_default_and_limits_come_first() -> None:
    assert UP.decide(ctx(1.0, running=1.0, deadline=None)) == DefaultRecoveryPolicy().decide(
        ctx(1.0, running=1.0, deadline=None))
    assert UP.decide(ctx(1.0, running=1.0, relaunch_count=10)).action is RecoveryAction.GIVE_UP
    assert UP.decide(ctx(21.0, running=1.0)).action is RecoveryAction.GIVE_UP


def test_the_engine_waits_then_buys_on_demand_as_the_policy_says() -> None:
    clock, store = Clock(), MemoryStore()
    site = [offer("aws", 3.0, zone="az1", region="us-east-1"),
            offer("gcp", 10.0, market=Market.ON_DEMAND, region="us-central1")]
    aws, gcp = MemoryProvider("aws", site), MemoryProvider("gcp", site)
    # Its agents answer (ReportingMonitor): hours pass here, and a silent node would end at its deadline.
    rec = engine(store, {"aws": aws, "gcp": gcp}, site, clock, recovery=recovery_for("uniform-progress"),
                 monitor=ReportingMonitor())
    # A 10 h job due in 20 h; a preempted zone cools down for 3 h (a daemon's "no spot there" signal).
    job = store.add_job(replace(spec(plan=replace(spec().plan, estimated_hours=10.0)), cooldown=timedelta(hours=3),
                                deadline=clock() + timedelta(hours=20)), clock())
    settle(rec, clock)
    [first] = live(aws, gcp)
    assert first.market is Market.SPOT
    clock.advance(hours=1)
    rec.tick()
    aws.preempt(first.instance_id)
    clock.advance(minutes=1)
    rec.tick()
    assert live(aws, gcp) == [] and store.job(job.id).status is JobStatus.RECOVERING
    assert "waiting" in store.kinds()
    clock.advance(minutes=30)
    rec.tick()
    assert live(aws, gcp) == []                                  # still ahead of the line: still waiting
    clock.advance(hours=1)
    rec.tick()
    [second] = live(aws, gcp)                                    # behind it: on-demand
    assert second.market is Market.ON_DEMAND and second.provider == "gcp"
    assert store.job(job.id).relaunch_count == 1


def test_the_daemon_config_names_the_policy(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import OrchConfig
    from orchestrator.daemon.assembly import load_service_settings

    config = OrchConfig(owner="tester", path=tmp_path / "none.yaml")
    monkeypatch.setenv("ORCH_RECOVERY_POLICY", "Uniform-Progress")
    monkeypatch.setenv("ORCH_RESTART_OVERHEAD_S", "360")
    settings = load_service_settings(config)
    assert (settings.recovery_policy, settings.restart_overhead) == ("uniform-progress", timedelta(minutes=6))
    assert isinstance(recovery_for(settings.recovery_policy), SpotPolicyRecovery)
    monkeypatch.setenv("ORCH_RECOVERY_POLICY", "cheapest")
    with pytest.raises(ConfigError, match="unknown policy 'cheapest'"):
        load_service_settings(config)


def test_with_no_config_the_daemon_runs_orchs_policy_and_default_names_the_plain_rule(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.file import OrchConfig
    from orchestrator.daemon.assembly import load_service_settings
    from orchestrator.policy.hybrid import HybridPolicy

    monkeypatch.delenv("ORCH_RECOVERY_POLICY", raising=False)
    config = OrchConfig(owner="tester", path=tmp_path / "none.yaml")
    assert load_service_settings(config).recovery_policy == "orch"
    # The engine as the daemon builds it with no setting: a deadline job's recovery is orch's (v3.3: the hybrid).
    clock, store = Clock(), MemoryStore()
    rec = engine(store, {}, [], clock)
    recovery = rec.deps.hooks.recovery
    assert isinstance(recovery, SpotPolicyRecovery) and isinstance(recovery.make_policy(), HybridPolicy)
    monkeypatch.setenv("ORCH_RECOVERY_POLICY", "default")
    assert load_service_settings(config).recovery_policy == "default"
    assert isinstance(recovery_for("default"), DefaultRecoveryPolicy)


ORCH = SpotPolicyRecovery(OrchPolicy)
WINDOW_H = 2 / 60


def noticed(age_h: float) -> RecoveryContext:
    """The 10 h job running on spot in az1 for ``age_h`` (its restart overhead is 0.2 h), just noticed."""
    return ctx(1.0, running=1.0, preempted_in=(), on_spot=True, current_place="az1", current_age_hours=age_h,
               noticed=True, notice_window_hours=WINDOW_H)


def test_a_noticed_machine_still_in_its_overhead_is_ended_by_orch_and_drained_by_uniform_progress() -> None:
    # 3 minutes old: 9 minutes of restart overhead left, more than the 2-minute window: it would be billed
    # for the window and make no progress (orch's rule 1). Uniform Progress keeps it to the end (drain).
    end = ORCH.decide(noticed(0.05))
    assert end.action is RecoveryAction.END and end.reason.startswith("orch-v1: end it now")
    assert UP.decide(noticed(0.05)).action is RecoveryAction.KEEP
    # 11.4 minutes old: 0.6 minutes of overhead left, then progress before the window ends: drain it.
    assert ORCH.decide(noticed(0.19)).action is RecoveryAction.KEEP
    # Without a notice the running machine is simply kept.
    assert ORCH.decide(replace(noticed(0.05), noticed=False)).action is RecoveryAction.KEEP
    # The default policy (and a job without a deadline) always drains.
    assert DefaultRecoveryPolicy().decide(noticed(0.05)).action is RecoveryAction.KEEP
    assert ORCH.decide(replace(noticed(0.05), deadline=None)).action is RecoveryAction.KEEP


@pytest.mark.parametrize(("policy", "age_min", "ended_at_once"), [
    ("orch", 1.0, True),                  # noticed while booting: ended at once, replacement starts at once
    ("orch", 20.0, False),                # past its overhead: drained (it may commit a checkpoint)
    ("uniform-progress", 1.0, False),     # UP drains whatever its age
])
def test_the_engine_ends_or_drains_a_noticed_machine_as_the_policy_says(
        policy: str, age_min: float, ended_at_once: bool) -> None:
    clock, store = Clock(), MemoryStore()
    site = [offer("aws", 3.0, zone="az1", region="us-east-1"), offer("aws", 3.5, zone="az2", region="us-east-1"),
            offer("gcp", 10.0, market=Market.ON_DEMAND, region="us-central1")]
    aws, gcp = MemoryProvider("aws", site), MemoryProvider("gcp", site)
    monitor, boot = ScriptedMonitor(), RecordingBootstrapper()
    rec = engine(store, {"aws": aws, "gcp": gcp}, site, clock, monitor=monitor, recovery=recovery_for(policy),
                 bootstrapper=boot)
    job = store.add_job(replace(spec(plan=replace(spec().plan, estimated_hours=10.0)),
                                deadline=clock() + timedelta(hours=20)), clock())
    rec.tick()
    clock.advance(seconds=10)
    rec.tick()
    [old] = live(aws, gcp)
    assert old.market is Market.SPOT and store.job(job.id).status is JobStatus.RUNNING
    clock.advance(minutes=age_min)
    monitor.reports[old.instance_id] = AgentReport(gpu_util_pct=(90.0,), notice=notice())
    report = rec.tick()
    assert report.preempted == 1 and report.relaunched == 1
    [new] = [i for i in live(aws, gcp) if i.instance_id != old.instance_id]
    assert (old.instance_id in [i.instance_id for i in live(aws, gcp)]) is not ended_at_once
    assert ("notice-end" in store.kinds()) is ended_at_once
    clock.advance(seconds=10)
    rec.tick()
    # Ended at once: nothing to wait for, the replacement's job starts; drained: it waits for the old machine.
    assert (new.instance_id in [iid for iid, *_ in boot.started]) is ended_at_once
    assert store.job(job.id).status is (JobStatus.RUNNING if ended_at_once else JobStatus.LAUNCHING)
