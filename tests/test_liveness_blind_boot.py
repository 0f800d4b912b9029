"""A machine whose job has no report channel (``Monitor.listens`` False) still has a boot deadline.

Silence there says nothing about the agent, but a machine that never comes up does: an attempt not yet started
(LAUNCHED or BOOTSTRAPPING: the cloud never listed it running, or the job was never started on it) past the
boot timeout since its launch is ended (``EndCause.BOOT_TIMEOUT``), whatever the channel, and the job is
relaunched, or failed at its ``max_relaunches``. Before, such a machine billed until someone noticed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

import yaml

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import ServiceSettings, build_service
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.manifest.schema import Manifest
from orchestrator.store import open_store, repo
from providers.base import Instance, InstanceState, LaunchSpec, Market, Offer
from providers.gpus import Interconnect
from tests.fakes.memory_provider import MemoryProvider
from tests.support.clock import ManualClock as Clock

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ROOT / "examples" / "command.yaml"     # no checkpoint store, no state store, no SSH key: blind
T4 = Offer("aws", "g4dn.xlarge", "us-east-1", "use1-az1", "T4-16G", 1, 16, 4, 16, Interconnect.PCIE, Market.SPOT,
           0.15, date(2026, 12, 1), True)
BOOT = timedelta(minutes=20)                     # ServiceSettings' default boot timeout
TICK = timedelta(minutes=1)


class StuckBooting(MemoryProvider):
    """The first ``stuck`` launches stay listed as booting (``loading``) for ever; later ones run."""

    def __init__(self, stuck: int) -> None:
        super().__init__("aws", [T4])
        self.stuck = stuck

    def launch(self, spec: LaunchSpec) -> Instance:
        inst = super().launch(spec)
        if self.stuck <= 0:
            return inst
        self.stuck -= 1
        booting = replace(inst, state=InstanceState.PENDING, raw_state="loading")
        self.plant(booting)
        return booting


def _run(tmp_path: Path, provider: StuckBooting, minutes: int, max_relaunches: int | None = None):  # type: ignore[no-untyped-def]
    clock = Clock()
    store = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    service = build_service(config=OrchConfig(owner="tester"), store=store, providers={"aws": provider},
                            catalog=[T4], clock=clock, settings=ServiceSettings())
    try:
        doc = yaml.safe_load(COMMAND.read_text())
        if max_relaunches is not None:
            # The one offer's zone cools after each boot timeout: a short cool-down lets the cap come soon.
            doc["policies"].update(max_relaunches=max_relaunches, preempted_zone_cooldown="1m")
        m = Manifest.model_validate(doc)
        with store.transaction() as tx:
            repo.apply_jobs(tx, [repo.AppliedJob(m, "h")], now=clock())
            job_id = repo.require_job(tx, m.name).id or 0
        service.reconciler.tick()
        first = service.engine_store.attempts_for_job(job_id)[0]
        assert not service.reconciler.deps.hooks.monitor.listens(service.engine_store.job(job_id), first,
                                                      provider.get(first.instance_id or "") or provider.live()[0])
        for _ in range(minutes):
            clock.advance(seconds=TICK.total_seconds())
            service.reconciler.tick()
        with store.transaction() as tx:
            kinds = [e.kind for e in repo.list_events(tx)]
        return service.engine_store.attempts_for_job(job_id), service.engine_store.job(job_id), kinds
    finally:
        service.close()


def test_a_blind_machine_stuck_booting_is_ended_at_the_boot_timeout_and_the_job_relaunched(tmp_path: Path) -> None:
    aws = StuckBooting(stuck=1)
    attempts, job, kinds = _run(tmp_path, aws, int(BOOT / TICK) + 60)
    first, second = attempts
    assert first.state is AttemptState.FAILED and first.end_cause is EndCause.BOOT_TIMEOUT
    assert first.ended_at is not None and first.created_at is not None
    assert first.ended_at - first.created_at <= BOOT + TICK
    assert aws.get(first.instance_id or "").state.is_gone      # ended at the cloud, not left billing
    assert second.state is AttemptState.RUNNING and job.relaunch_count == 1
    assert [i.instance_id for i in aws.live()] == [second.instance_id]
    assert kinds.count("boot-timeout") == 1


def test_a_blind_job_whose_machines_never_boot_fails_at_its_relaunch_cap(tmp_path: Path) -> None:
    aws = StuckBooting(stuck=100)
    attempts, job, kinds = _run(tmp_path, aws, int(BOOT / TICK) * 4 + 10, max_relaunches=2)
    assert [a.end_cause for a in attempts] == [EndCause.BOOT_TIMEOUT] * 3
    assert job.status is JobStatus.FAILED and "relaunch-cap" in kinds
    assert aws.live() == []                              # nothing left billing


def test_a_blind_machine_that_runs_is_not_ended_by_the_boot_timeout(tmp_path: Path) -> None:
    aws = StuckBooting(stuck=0)
    attempts, job, kinds = _run(tmp_path, aws, int(BOOT / TICK) * 3)
    assert job.status is JobStatus.RUNNING
    assert [a.state for a in attempts] == [AttemptState.RUNNING] and "boot-timeout" not in kinds
