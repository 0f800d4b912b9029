"""Errors carry the node's own words and a TYPED cause, each with its fix (issue 31): decided where the failure is
seen (orchestrator/engine/failure.py), from a provider's typed error or the agent's exit facts; shown by
``orch status``, ``orch logs`` and the console as the cause, the first line of the words, and the fix."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from orchestrator.app.status import job_failure, status
from orchestrator.cli.main import app
from orchestrator.cli.status_table import WIDTH, status_lines
from orchestrator.config.file import OrchConfig
from orchestrator.console.views import Chrome, fleet_page, job_page
from orchestrator.daemon.assembly import Service, ServiceSettings, build_service
from orchestrator.engine.failure import SETUP_FAILED_EXIT, Failure, FailureCause, of_exit, of_provider_error
from orchestrator.engine.hooks import AgentReport, NoStartupScript
from orchestrator.engine.states import JobStatus
from orchestrator.runtime.render_input import Launcher, RenderInput
from orchestrator.runtime.render_launch import launch_lines
from orchestrator.store import open_store, repo
from orchestrator.store.models import Attempt
from providers.base import Market, Offer
from providers.errors import (
    AuthError,
    InsufficientCapacityError,
    ProviderUnavailableError,
    QuotaExceededError,
)
from providers.gpus import Interconnect
from providers.ssh.adapter import VerifyFailedError, WorkdirMissingError, translate_error
from providers.ssh.transport import ExecResult
from tests.fakes.memory_provider import MemoryProvider
from tests.support.clock import ManualClock as Clock
from tests.support.manifests import manifest
from tests.test_engine import ReportingMonitor

A10G = Offer("aws", "g5.xlarge", "us-east-1", "use1-az1", "A10G-24G", 1, 24, 4, 16, Interconnect.PCIE,
             Market.ON_DEMAND, 1.0, date(2026, 12, 1), True)
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


# -- classification: one cause per typed fact, each with its own fix ------------------------------------------

def test_provider_errors_become_capacity_quota_auth_workdir_driver() -> None:
    cases = {
        FailureCause.CAPACITY: InsufficientCapacityError("no g5.xlarge in use1-az1", provider="aws"),
        FailureCause.QUOTA: QuotaExceededError("vCPU limit 0 for G instances", provider="aws"),
        FailureCause.AUTH: AuthError("the API key was refused", provider="lambda"),
        FailureCause.WORKDIR: translate_error(WorkdirMissingError("box", "/data/orch", "test -d failed"), "box"),
        FailureCause.DRIVER: translate_error(VerifyFailedError(
            "box", "nvidia-smi -L", ExecResult(9, "", "NVIDIA-SMI has failed because it couldn't communicate")), "box"),
    }
    for cause, exc in cases.items():
        failure = of_provider_error(exc)
        assert failure is not None and failure.cause is cause, (cause, exc)
        assert failure.words == str(exc) and failure.first_line
    assert of_provider_error(ProviderUnavailableError("502 from the API", provider="aws")) is None
    fixes = [c.fix for c in FailureCause]
    assert len(set(fixes)) == len(fixes) == 7 and all(fixes)


def test_exit_facts_become_setup_command_driver() -> None:
    assert of_exit(SETUP_FAILED_EXIT, "orch: setup failed (exit 1) | ERROR: No matching distribution").cause \
        is FailureCause.SETUP
    assert of_exit(127, "bash: line 1: trian.py: command not found").cause is FailureCause.COMMAND
    assert of_exit(1, "Traceback (most recent call last): | ValueError: bad lr").cause is FailureCause.COMMAND
    driver = of_exit(1, "RuntimeError: Found no NVIDIA driver on your system. | exit")
    assert driver.cause is FailureCause.DRIVER and driver.first_line == "RuntimeError: Found no NVIDIA driver on " \
                                                                        "your system."
    assert Failure.from_data(driver.to_data()) == driver
    assert Failure.from_data({"cause": "gremlins"}) is None and Failure.from_data(None) is None


def _run(lines: list[str]) -> subprocess.CompletedProcess[str]:
    # POSIX sh (dash here), as the node runs it: a container may have no bash.
    return subprocess.run(["sh", "-c", "\n".join(["set -eu", *lines])], capture_output=True, text=True, timeout=30)


def test_the_startup_script_says_a_failed_setup_line_with_its_own_exit() -> None:
    """The rendered launch section: a failing setup line exits 78 and says so; the command's own failure keeps
    its code (so the two are told apart from the exit alone)."""
    ri = RenderInput(job_name="t", launcher=Launcher.COMMAND, command="exit 3",
                     setup=("echo preparing", "false", "echo never"))
    done = _run(launch_lines(ri))
    assert done.returncode == SETUP_FAILED_EXIT and "orch: setup failed (exit 1)" in done.stderr
    assert "never" not in done.stdout
    ok_setup = _run(launch_lines(replace(ri, setup=("if true; then", "  echo multi-line ok", "fi"))))
    assert ok_setup.returncode == 3 and "multi-line ok" in ok_setup.stdout and "setup failed" not in ok_setup.stderr


# -- the engine records it; status, logs and the console show it --------------------------------------------------



@dataclass
class World:
    service: Service
    clock: Clock
    aws: MemoryProvider
    monitor: ReportingMonitor

    def tick(self) -> None:
        self.service.reconciler.tick()
        self.clock.now += timedelta(minutes=1)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    clock, aws, monitor = Clock(), MemoryProvider("aws", [A10G]), ReportingMonitor()
    service = build_service(config=OrchConfig(owner="tester"), store=open_store(f"sqlite:///{tmp_path / 'o.db'}"),
                            providers={"aws": aws}, catalog=[A10G], clock=clock, settings=ServiceSettings(),
                            monitor=monitor, startup=NoStartupScript())
    assert service.store is not None
    with service.store.transaction() as tx:
        repo.apply_jobs(tx, [repo.AppliedJob(manifest("train", gpus=["A10G-24G"]), "h-train")], now=clock())
    yield World(service, clock, aws, monitor)
    service.close()


WORDS = "orch: setup failed (exit 1) | ERROR: Could not find a version that satisfies the requirement torch==9.9"


def test_a_failed_setup_is_recorded_typed_and_shown_by_status_and_logs(world: World) -> None:
    world.tick()
    [inst] = world.aws.live()
    world.monitor.reports[inst.instance_id] = AgentReport(exit_code=SETUP_FAILED_EXIT, last_words=WORDS)
    store = world.service.store
    assert store is not None
    for _ in range(5):          # started (a tick or two), then its agent's exit is read
        world.tick()
    assert world.service.engine_store.job(1).status is JobStatus.FAILED
    with store.transaction() as tx:
        [attempt] = list(tx.exec(select(Attempt)))
        [event] = [e for e in repo.list_events(tx) if e.kind == "node-failed"]
    assert attempt.reason is not None and attempt.reason.startswith("setup: job exited 78: orch: setup failed")
    assert event.data["cause"] == "setup" and event.data["words"] == WORDS and event.data["exit_code"] == 78
    [view] = status(store).jobs
    assert view.status == JobStatus.FAILED.value and view.failure == Failure(FailureCause.SETUP, WORDS)
    assert view.to_json()["failure"]["first_line"] == "orch: setup failed (exit 1)"
    lines = status_lines(status(store))
    assert "  cause setup: orch: setup failed (exit 1)" in lines
    fix = [ln for ln in lines if ln.startswith("  fix: ")]
    assert fix and fix[0].startswith("  fix: a setup: line of the manifest failed")
    assert all(len(ln) <= WIDTH for ln in lines)
    assert job_failure(store, "train") == view.failure


def test_a_capacity_refusal_is_typed_not_an_exception_class_name(world: World) -> None:
    world.aws.fail("launch", InsufficientCapacityError("no g5.xlarge capacity in use1-az1", provider="aws"))
    world.tick()
    store = world.service.store
    assert store is not None
    with store.transaction() as tx:
        [attempt] = list(tx.exec(select(Attempt)))
    assert attempt.reason == "capacity: aws: no g5.xlarge capacity in use1-az1"
    assert "InsufficientCapacityError" not in (attempt.reason or "")
    [view] = status(store).jobs
    assert view.status == JobStatus.PENDING.value
    assert view.failure is not None and view.failure.cause is FailureCause.CAPACITY


def test_the_console_and_logs_show_the_cause_the_first_line_and_the_fix(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    words = "orch: setup failed (exit 1) <script>alert(1)</script> | second line"
    try:
        with store.transaction() as tx:
            repo.apply_jobs(tx, [repo.AppliedJob(manifest("train", gpus=["A10G-24G"]), "h")], now=T0)
            job = repo.require_job(tx, "train")
            repo.set_job_status(tx, job, JobStatus.FAILED, now=T0)
            repo.record_event(tx, "node-failed", "node 0 setup failed", job_id=job.id,
                              data=Failure(FailureCause.SETUP, words).to_data(), ts=T0)
            repo.apply_jobs(tx, [repo.AppliedJob(manifest("other", gpus=["A10G-24G"]), "h2")], now=T0)
        chrome = Chrome(now=T0 + timedelta(minutes=1), csrf="c", token_required=False)
        for page in (fleet_page(store, chrome), job_page(store, chrome, "train")):
            assert page.status == 200
            assert '<span class="cause">setup</span>' in page.html
            assert "orch: setup failed (exit 1) &lt;script&gt;alert(1)&lt;/script&gt;" in page.html
            assert "second line" not in page.html          # the first line only
            assert "<script>alert(1)" not in page.html
            assert "a setup: line of the manifest failed" in page.html
        assert fleet_page(store, chrome).html.count('<span class="cause">') == 1    # "other" has none
        (tmp_path / "config.yaml").write_text("owner: tester\n")
        monkeypatch.setenv("ORCH_CONFIG", str(tmp_path / "config.yaml"))
        monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'c.db'}")
        said = CliRunner().invoke(app, ["logs", "train"])
        assert said.exit_code == 1          # it never ran anywhere: nothing to read, but the why is said first
        assert said.stderr.startswith("orch: job train: cause setup: orch: setup failed (exit 1)")
        assert "orch: fix: a setup: line of the manifest failed" in said.stderr
        # In 80 columns (the last line is the error's, one line by convention), wrapped, never cut.
        why = said.stderr.splitlines()[:-1]
        assert why and max(map(len, why)) <= 80 and said.stderr.splitlines()[-1].startswith("error: "), said.stderr
        assert f"orch: fix: {FailureCause.SETUP.fix}" in " ".join(" ".join(why).split())
    finally:
        store.close()
