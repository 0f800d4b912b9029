"""Liveness only where a channel exists (orchestrator/engine/liveness.py, ``Monitor.listens``).

A job with no checkpoint store, no ``daemon.state_store`` and no SSH key (examples/command.yaml) has nowhere
to report: with the default config it used to be ended as ``boot-timeout`` every 20 minutes and launched
again from scratch. It is now watched by the cloud's state only, and ``orch plan``/``apply`` say so.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import yaml
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import ServiceSettings, build_service
from orchestrator.engine.states import AttemptState
from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.node_state import BLIND
from orchestrator.store import open_store, repo
from providers.base import Market, Offer
from providers.gpus import Interconnect
from tests.fakes.memory_provider import MemoryProvider
from tests.support.clock import ManualClock as Clock

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ROOT / "examples" / "command.yaml"
#: A spot T4 cheap enough that 24 h stay inside the example's $5 budget (24 x $0.15 = $3.60).
T4 = Offer("aws", "g4dn.xlarge", "us-east-1", "use1-az1", "T4-16G", 1, 16, 4, 16, Interconnect.PCIE, Market.SPOT,
           0.15, date(2026, 12, 1), True)
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)




def test_a_job_with_no_report_channel_runs_24_hours_with_the_default_config(tmp_path: Path) -> None:
    clock = Clock()
    store = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    aws = MemoryProvider("aws", [T4])
    # The default config and settings: no state store, no SSH key; the default monitor and bootstrapper.
    service = build_service(config=OrchConfig(owner="tester"), store=store, providers={"aws": aws},
                            catalog=[T4], clock=clock, settings=ServiceSettings())
    try:
        m = Manifest.model_validate(yaml.safe_load(COMMAND.read_text()))
        with store.transaction() as tx:
            repo.apply_jobs(tx, [repo.AppliedJob(m, "h")], now=T0)
            job_id = repo.require_job(tx, m.name).id or 0
        for _ in range(24 * 60):
            service.reconciler.tick()
            clock.now += timedelta(minutes=1)
        attempts = service.engine_store.attempts_for_job(job_id)
        job = service.engine_store.job(job_id)
        ended = [a for a in attempts if a.state.is_final]
        assert (len(attempts), len(ended), job.relaunch_count) == (1, 0, 0), [(a.state, a.end_cause) for a in attempts]
        assert attempts[0].state is AttemptState.RUNNING and len(aws.live()) == 1
        with store.transaction() as tx:
            kinds = {e.kind for e in repo.list_events(tx)}
        assert not kinds & {"boot-timeout", "node-silent", "recovering"}, kinds
    finally:
        service.close()


def test_plan_and_apply_say_such_a_job_is_blind(tmp_path: Path) -> None:
    runner = CliRunner()
    planned = runner.invoke(app, ["plan", str(COMMAND)])
    assert BLIND in " ".join(planned.output.split())          # wrapped at 80 columns
    store = f"sqlite:///{tmp_path / 'orch.db'}"
    applied = runner.invoke(app, ["apply", str(COMMAND), "--no-launch"], env={"ORCH_DATABASE_URL": store})
    assert f"note: eval-sweep: {BLIND}" in " ".join(applied.output.split()), applied.output

    # With a daemon-wide state store its agent reports there: not blind.
    (tmp_path / "config.yaml").write_text("daemon: {state_store: 's3://bucket/orch-state'}\n")
    planned = runner.invoke(app, ["plan", str(COMMAND)], env={"ORCH_CONFIG": str(tmp_path / "config.yaml")})
    assert planned.exit_code == 0 and "blind" not in planned.output, planned.output


def test_a_job_on_a_machine_of_yours_is_not_called_blind(tmp_path: Path) -> None:
    """orch reads an SSH-provider host over SSH with the provider's key (``SshMonitor.listens``): plan and apply
    said such a job was blind ("no report channel ... no SSH key")."""
    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  ssh:\n    hosts:\n      - {name: box, address: 10.0.0.5, gpu: T4, gpu_count: 1,"
                      " price_hr: 0.01}\n")
    job = tmp_path / "own.yaml"
    job.write_text("apiVersion: orch/v1\nkind: Job\nname: own-job\nresources: {gpu: T4}\n"
                   "run: {launcher: command, command: nvidia-smi}\ncode: {enabled: false}\n")
    env = {"ORCH_CONFIG": str(config), "ORCH_DATABASE_URL": f"sqlite:///{tmp_path / 'orch.db'}"}
    runner = CliRunner()
    planned = runner.invoke(app, ["plan", str(job)], env=env)
    assert planned.exit_code == 0 and "chosen ssh box" in planned.output, planned.output
    assert "blind" not in planned.output
    applied = runner.invoke(app, ["apply", str(job), "--dry-run"], env=env)
    assert applied.exit_code == 0 and "own-job              ssh box" in applied.output, applied.output
    assert "blind" not in applied.output
