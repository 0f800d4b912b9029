"""orchestrator.runtime.engine_hooks and ssh_monitor without sshd: status -> AgentReport, per-attempt render
input, and the bootstrapper's reachability and idempotency over a local transport (tests/e2e drives them over
real SSH)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.hooks import Notice, NoticeKind
from orchestrator.engine.jobspec import jobspec_from_manifest
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.engine.wake import WatchFor
from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.bootstrap import BootstrapError
from orchestrator.runtime.engine_hooks import SshBootstrapper
from orchestrator.runtime.from_manifest import render_input_for
from orchestrator.runtime.node_facts import NodeSettings, launch_facts
from orchestrator.runtime.render_input import CloudKind
from orchestrator.runtime.ssh_monitor import SshMonitor, report_from_status
from orchestrator.runtime.status import JobState, parse_status
from orchestrator.runtime.transport_pool import TransportPool
from providers.base import Instance, InstanceState, Market, Offer
from providers.gpus import Interconnect
from providers.ssh.errors import TransportUnreachableError
from providers.ssh.hostkeys import HostKeyStore
from providers.ssh.local import LocalTransport
from providers.ssh.transport import ExecResult
from tests.support.manifests import manifest

NOW = 1_764_676_200.0


def _poll(cond: Callable[[], Any], deadline_s: float) -> Any:
    end = time.monotonic() + deadline_s
    while not (value := cond()):
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)
    return value


def _status(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1, "job_name": "tiny", "node_rank": 0,
        "agent": {"pid": 4242, "started_at": NOW - 100, "heartbeat": NOW - 1},
        "job": {"state": "running", "pid": 4250, "exit_code": None, "started_at": NOW - 99, "ended_at": None},
        "gpu": {"available": True, "error": None,
                "samples": [{"time": NOW - 6, "gpus": [{"index": 0, "util": 10.0, "mem_used_mib": 1.0,
                                                        "mem_total_mib": 2.0, "power_w": 3.0}]},
                            {"time": NOW - 1, "gpus": [
                                {"index": 0, "util": 87.0, "mem_used_mib": 1.0, "mem_total_mib": 2.0, "power_w": 3.0},
                                {"index": 1, "util": None, "mem_used_mib": None, "mem_total_mib": None,
                                 "power_w": None},
                                {"index": 2, "util": 93.0, "mem_used_mib": 1.0, "mem_total_mib": 2.0,
                                 "power_w": 3.0}]}],
                "summary": {"samples": 2, "gpus": 3, "window_s": 5.0, "mean_util": 60.0, "max_util": 93.0,
                            "last_mean_util": 90.0, "max_mem_used_mib": 1.0}},
        "notices": [], "checkpoint_requests": [],
        "checkpoints": [{"name": "step-10", "step": 10, "uri": "s3://b/p/step-10", "committed_at": NOW - 20},
                        {"name": "step-5", "step": 5, "uri": "s3://b/p/step-5", "committed_at": NOW - 30},
                        {"name": "step-15", "step": 15, "uri": "s3://b/p/step-15", "committed_at": NOW - 2}],
        "latest": "step-10", "failed_uploads": {}, "errors": [],
    }
    doc.update(over)
    return doc


def _report(**over: Any) -> Any:
    return report_from_status(parse_status(json.dumps(_status(**over))), NOW)


def test_report_carries_latest_sample_and_checkpoints_up_to_latest_by_step() -> None:
    r = _report()
    assert r.gpu_util_pct == (87.0, 93.0)           # the newest sample; [N/A] GPUs left out
    # step-15 was uploaded but LATEST did not move to it: the store's last checkpoint must be LATEST.
    assert r.checkpoints == (("s3://b/p/step-5", 5), ("s3://b/p/step-10", 10))
    assert r.notice is None and r.exit_code is None


def test_report_without_latest_has_no_checkpoints_and_a_stale_agent_no_utilization() -> None:
    r = _report(latest=None, agent={"pid": 1, "started_at": NOW - 500, "heartbeat": NOW - 300})
    assert r.checkpoints == () and r.gpu_util_pct == ()


def test_report_notice_with_its_source_and_exit_codes() -> None:
    notice = {"cloud": "aws", "kind": "spot-interruption", "key": "aws:instance-action:terminate:t",
              "detail": {"action": "terminate"}, "seen_at": NOW - 3}
    heard = _report(notices=[notice]).notice
    assert heard == Notice("aws", NoticeKind.SPOT_INTERRUPTION, "aws:instance-action:terminate:t",
                           datetime.fromtimestamp(NOW - 3, UTC))
    assert heard is not None and heard.describe() == "aws spot-interruption (agent, aws:instance-action:terminate:t)"
    exited = {"state": "exited", "pid": 1, "exit_code": 3, "started_at": NOW - 9, "ended_at": NOW - 2}
    assert _report(job=exited).exit_code == 3
    failed = {"state": "failed", "pid": None, "exit_code": None, "started_at": None, "ended_at": NOW}
    assert _report(job=failed).exit_code == 127


def test_report_carries_an_advisory_apart_from_the_ending_notice() -> None:
    advisory = {"cloud": "aws", "kind": "rebalance-recommendation", "key": "aws:rebalance:t",
                "detail": {"noticeTime": "t"}, "seen_at": NOW - 3}
    r = _report(notices=[advisory])
    assert r.notice is None      # nothing ends the attempt
    assert r.advisories == (Notice("aws", NoticeKind.REBALANCE, "aws:rebalance:t",
                                   datetime.fromtimestamp(NOW - 3, UTC)),)


def test_a_notice_kind_is_a_member_never_its_text() -> None:
    """The engine decides on the kind (ends the attempt or not): text, even a member's, is refused."""
    seen = datetime.fromtimestamp(NOW, UTC)
    assert Notice("aws", NoticeKind.parse("spot-interruption"), "k", seen).kind.ends_attempt
    for text in ("spot-interruption", "spot/instance-action"):
        with pytest.raises(TypeError, match="must be a NoticeKind"):
            Notice("aws", text, "k", seen)  # type: ignore[arg-type]
    unknown = _report(notices=[{"cloud": "aws", "kind": "a-newer-kind", "key": "n", "detail": {}, "seen_at": NOW}])
    assert unknown.notice is not None and unknown.notice.kind is NoticeKind.UNKNOWN   # a newer agent's: ends it


# --- render input per attempt -----------------------------------------------------------------------

def _offer(provider: str) -> Offer:
    return Offer(provider, "box", "r1", None, "A100-80G", 2, 80, 8, 64, Interconnect.PCIE, Market.SPOT, 1.0,
                 date(2026, 12, 1))


def _job(m: Manifest | None = None) -> JobRecord:
    m = m or MANIFEST
    now = datetime.now(UTC)
    return JobRecord(id=1, name=m.name, manifest=m, spec=jobspec_from_manifest(m, now), status=JobStatus.LAUNCHING,
                     desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)


def _attempt(provider: str = "ssh", launch_id: str = "labc123", ckpt: str | None = None) -> AttemptRecord:
    return AttemptRecord(7, 1, launch_id, AttemptState.LAUNCHED, _offer(provider), "box", checkpoint_restored=ckpt)


def _instance(provider: str = "ssh", instance_id: str = "box") -> Instance:
    return Instance(provider, instance_id, "labc123", "me", InstanceState.RUNNING, "box", "r1")


MANIFEST = manifest("tiny", count=2, run={"launcher": "command", "command": "sleep 30"}, env={"A": "1"})
#: The agent's loops, fast: a machine's setting (no manifest field), for every "ssh" machine here.
FAST = {"ssh": NodeSettings(sample_interval_s=0.2, notice_interval_s=0.2)}


def test_render_input_takes_the_cloud_from_the_provider_and_node_overrides() -> None:
    job = _job()
    aws = render_input_for(job.manifest, launch_facts(job, _attempt("aws", ckpt="s3://b/p/step-5")))
    assert aws.agent.cloud is CloudKind.AWS and aws.agent.aws_metadata_url == ""
    assert dict(aws.env) == {"A": "1", "ORCH_LAUNCH_ID": "labc123", "ORCH_RESTORE_HINT": "s3://b/p/step-5"}
    assert aws.master_port == 29500 and aws.gpus_per_node == 2          # the offer's GPUs
    own = render_input_for(job.manifest, launch_facts(job, _attempt(), NodeSettings(
        cloud=CloudKind.AWS, aws_metadata_url="http://127.0.0.1:9", master_port=4000)))
    assert (own.agent.cloud, own.agent.aws_metadata_url, own.master_port) == (CloudKind.AWS, "http://127.0.0.1:9",
                                                                              4000)
    assert render_input_for(job.manifest, launch_facts(job, _attempt())).agent.cloud is CloudKind.NONE


def test_the_monitor_listens_where_a_channel_exists(tmp_path: Path) -> None:
    """Liveness deadlines apply only where orch can hear a node (engine/liveness.py): an own machine always, a
    cloud machine only with orch's key and a host-key store. (``listens`` once sat below the class, as a
    function nested in ``_last_words``: every cloud machine was "heard", keyless ones included.)"""
    own = SshMonitor(TransportPool({"ssh": OwnMachines(RecordingTransport(tmp_path / "m"))}))  # type: ignore[dict-item]
    assert own.listens(_job(), _attempt(), _instance())
    keyless = SshMonitor(TransportPool({}))
    assert not keyless.listens(_job(), _attempt("aws"), _instance("aws", "i-1"))
    keyed = SshMonitor(TransportPool({}, key_path=tmp_path / "id", host_keys=HostKeyStore(tmp_path / "known")))
    assert keyed.listens(_job(), _attempt("aws"), _instance("aws", "i-1"))


# --- the bootstrapper over a local transport ---------------------------------------------------------

class RecordingTransport(LocalTransport):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.commands: list[str] = []
        self.down = False
        #: (entered, go): the next upload (a ``tar -x`` exec) sets ``entered`` and waits for ``go`` first.
        self.hold_upload: tuple[threading.Event, threading.Event] | None = None

    def exec(self, cmd: str, timeout: float, env: Mapping[str, str] | None = None,
             stdin: bytes | str | None = None) -> ExecResult:
        if self.down:
            raise TransportUnreachableError("connection refused", endpoint="test")
        self.commands.append(cmd)
        if self.hold_upload is not None and "tar -x" in cmd:
            (entered, go), self.hold_upload = self.hold_upload, None
            entered.set()
            assert go.wait(60), "the test never let the upload go on"
        return super().exec(cmd, timeout, env, stdin)


class OwnMachines:
    """A provider that reaches its instances itself (as SshProvider.transport does)."""

    def __init__(self, transport: RecordingTransport) -> None:
        self.t = transport

    def transport(self, instance_id: str) -> RecordingTransport:
        return self.t


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[RecordingTransport]:
    t = RecordingTransport(tmp_path / "machine")
    yield t
    status = t.root / ".orch" / "jobs" / "tiny" / "status.json"
    if status.exists():
        doc = json.loads(status.read_text())
        for pid in (doc["job"]["pid"], doc["agent"]["pid"]):   # both lead their own process groups
            if pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)


def _hooks(t: RecordingTransport, environ: Mapping[str, str] | None = None) -> tuple[SshBootstrapper, SshMonitor]:
    pool = TransportPool({"ssh": OwnMachines(t)})  # type: ignore[dict-item]
    boot = SshBootstrapper(pool, FAST, environ=environ or {}, status_deadline_s=60)   # hang guards only
    return boot, SshMonitor(pool, FAST)


def test_unreachable_machine_is_not_started_yet(machine: RecordingTransport) -> None:
    boot, monitor = _hooks(machine)
    machine.down = True
    assert boot.start(_job(), _attempt(), _instance()) is False
    assert monitor.read(_job(), _attempt(), _instance()) is None


def test_second_start_finds_the_running_agent(machine: RecordingTransport) -> None:
    boot, monitor = _hooks(machine)
    assert boot.start(_job(), _attempt(), _instance()) is True
    assert boot.start(_job(), _attempt(), _instance()) is True
    assert sum("orch_agent.pyz --config" in c for c in machine.commands) == 1
    report = monitor.read(_job(), _attempt(), _instance())
    assert report is not None and report.exit_code is None


def test_a_status_left_by_another_launch_is_moved_aside(machine: RecordingTransport) -> None:
    work = machine.root / ".orch" / "jobs" / "tiny"
    work.mkdir(parents=True)
    old = _status(notices=[{"cloud": "aws", "kind": "spot-interruption", "key": "k", "detail": {}, "seen_at": NOW}],
                  agent={"pid": 999999, "started_at": NOW, "heartbeat": NOW})
    (work / "status.json").write_text(json.dumps(old))
    boot, monitor = _hooks(machine)
    assert boot.start(_job(), _attempt(launch_id="lnew000"), _instance()) is True
    report = monitor.read(_job(), _attempt(launch_id="lnew000"), _instance())
    assert report is not None and report.notice is None            # the old launch's notice is not ours
    assert json.loads((work / "status.json.previous").read_text())["notices"][0]["key"] == "k"


def test_secret_values_come_from_the_environment_by_name(machine: RecordingTransport) -> None:
    command = 'printf %s "$TOK" | sha256sum > tok.sha'
    job = _job(manifest("tiny", count=2, run={"launcher": "command", "command": command}, secrets=["TOK"]))
    boot, _ = _hooks(machine)
    with pytest.raises(BootstrapError, match="TOK"):
        boot.start(job, _attempt(), _instance())
    boot, monitor = _hooks(machine, {"TOK": "s3cr3t"})
    assert boot.start(job, _attempt(), _instance()) is True

    def exited() -> Any:
        r = monitor.read(job, _attempt(), _instance())
        return r if r is not None and r.exit_code is not None else None

    assert _poll(exited, 60.0).exit_code == 0
    seen = (machine.root / ".orch" / "jobs" / "tiny" / "tok.sha").read_text().split()[0]
    assert seen == hashlib.sha256(b"s3cr3t").hexdigest()            # the job got the value...
    assert not [p for p in machine.root.rglob("*") if p.is_file() and b"s3cr3t" in p.read_bytes()]  # ...no file did


def test_staged_while_waiting_the_agent_waits_and_the_start_only_gives_the_go(machine: RecordingTransport) -> None:
    # A status another launch left is moved aside by the staging, so the start does not take it for its own.
    work = machine.root / ".orch" / "jobs" / "tiny"
    work.mkdir(parents=True)
    (work / "status.json").write_text(json.dumps(_status(agent={"pid": 999999, "started_at": NOW,
                                                                "heartbeat": NOW})))
    boot, monitor = _hooks(machine)
    attempt = _attempt(launch_id="lstaged0")
    assert boot.stage(_job(), attempt, _instance()) is False                          # on its own thread
    assert boot.join_stage(attempt.launch_id) is True
    assert (work / "orch_agent.pyz").exists() and (work / "startup.sh").exists()
    assert (work / "status.json.previous").exists()
    # Its agent is up ahead of the go: it reports itself waiting, its job has not started.
    [started] = [c for c in machine.commands if "orch_agent.pyz --config" in c]
    assert "--await-go start.go" in started
    # Started without a wait for its Python: its first status comes when it comes (the go waits on the node).
    waiting = _poll(lambda: parse_status(p.read_bytes()) if (p := work / "status.json").exists() else None, 60.0)
    assert waiting.awaits_go and waiting.job.state is JobState.PENDING and waiting.launch_id == "lstaged0"
    assert not (work / "job.log").exists()
    staged_at = len(machine.commands)
    assert boot.stage(_job(), attempt, _instance()) is True                           # once per launch
    assert len(machine.commands) == staged_at
    assert boot.start(_job(), attempt, _instance()) is True
    [go] = machine.commands[staged_at:]                                               # the go: one exec
    assert ": > start.go" in go and "orch_agent.pyz" not in go
    running = parse_status((work / "status.json").read_bytes())
    assert running.job.state is not JobState.PENDING and not running.awaits_go
    assert running.agent_pid == waiting.agent_pid                                     # the same agent
    assert not (work / "start.go").exists() and not (work / "start.go.wait").exists()
    report = monitor.read(_job(), attempt, _instance())
    assert report is not None and report.notice is None
    assert boot.start(_job(), attempt, _instance()) is True                           # found started
    assert sum("orch_agent.pyz --config" in c for c in machine.commands) == 1


def test_a_start_never_runs_beside_its_launchs_staging(machine: RecordingTransport) -> None:
    """A staging that outlasts the start's wait for it (a big code pack on a slow link) is not raced: beside
    it the start's probe finds no agent yet and its upload starts a second agent of the launch. The staging's
    upload is held by an event until the start has answered, so this is the slow interleaving on any machine;
    the start's 0.05 s wait only says when it stops waiting, the held upload decides what it finds."""
    entered, go = threading.Event(), threading.Event()
    machine.hold_upload = (entered, go)
    boot, _ = _hooks(machine)
    boot.status_deadline_s = 0.05
    attempt = _attempt(launch_id="lslow000")
    assert boot.stage(_job(), attempt, _instance()) is False
    assert entered.wait(60)                                                     # the staging is uploading
    before = len(machine.commands)
    assert boot.start(_job(), attempt, _instance()) is False                    # not yet: the next tick asks
    assert boot.stage(_job(), attempt, _instance()) is False                    # no second staging beside it
    assert len(machine.commands) == before                                      # nothing ran beside it
    go.set()
    assert boot.join_stage(attempt.launch_id) is True
    boot.status_deadline_s = 60                                                 # the go's wait on the node
    assert boot.start(_job(), attempt, _instance()) is True
    assert sum("orch_agent.pyz --config" in c for c in machine.commands) == 1    # one agent, given the go
    work = machine.root / ".orch" / "jobs" / "tiny"
    assert parse_status((work / "status.json").read_bytes()).job.state is not JobState.PENDING


def test_a_restarted_daemon_gives_the_go_to_the_waiting_agent(machine: RecordingTransport) -> None:
    # The daemon that staged is gone; a new one (nothing in memory) finds the agent waiting: it gives the go,
    # neither takes the pending job for started nor starts a second agent.
    boot, _ = _hooks(machine)
    attempt = _attempt(launch_id="lrestart")
    boot.stage(_job(), attempt, _instance())
    assert boot.join_stage(attempt.launch_id) is True
    again, _ = _hooks(machine)
    assert again.start(_job(), attempt, _instance()) is True
    work = machine.root / ".orch" / "jobs" / "tiny"
    assert parse_status((work / "status.json").read_bytes()).job.state is not JobState.PENDING
    assert sum("orch_agent.pyz --config" in c for c in machine.commands) == 1


def test_a_waiting_agent_that_died_is_replaced_with_its_secrets(machine: RecordingTransport) -> None:
    command = 'printf %s "$TOK" | sha256sum > tok.sha'
    job = _job(manifest("tiny", count=2, run={"launcher": "command", "command": command}, secrets=["TOK"]))
    boot, monitor = _hooks(machine, {"TOK": "s3cr3t"})
    attempt = _attempt(launch_id="ldied000")
    boot.stage(job, attempt, _instance())
    assert boot.join_stage(attempt.launch_id) is True
    work = machine.root / ".orch" / "jobs" / "tiny"
    pid = _poll(lambda: parse_status(p.read_bytes()).agent_pid if (p := work / "status.json").exists() else None, 60)
    os.killpg(pid, signal.SIGKILL)
    _poll(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2], 60)
    assert boot.start(job, attempt, _instance()) is True                   # a fresh agent, files uploaded again
    assert sum("orch_agent.pyz --config" in c for c in machine.commands) == 2

    def exited() -> Any:
        r = monitor.read(job, attempt, _instance())
        return r if r is not None and r.exit_code is not None else None

    assert _poll(exited, 60.0).exit_code == 0
    assert (work / "tok.sha").read_text().split()[0] == hashlib.sha256(b"s3cr3t").hexdigest()


def test_staging_an_unreachable_machine_leaves_the_start_to_upload(machine: RecordingTransport) -> None:
    boot, _ = _hooks(machine)
    machine.down = True
    assert boot.stage(_job(), _attempt(), _instance()) is False
    assert boot.join_stage(_attempt().launch_id) is False
    machine.down = False
    assert boot.start(_job(), _attempt(), _instance()) is True
    assert [c for c in machine.commands if "mkdir -p" in c and "tar -x" in c]     # the start uploaded itself


def test_await_report_waits_on_the_node_for_an_ending_notice_or_the_commit(machine: RecordingTransport) -> None:
    """The wake watch's waiter (orchestrator/engine/wake.py): one exec that returns once the status says it."""
    _, monitor = _hooks(machine)
    work = machine.root / ".orch" / "jobs" / "tiny"
    work.mkdir(parents=True)
    status = work / "status.json"

    def says(why: WatchFor, limit_s: float = 0.2, **over: Any) -> bool:
        status.write_text(json.dumps(_status(**{"launch_id": "labc123", **over})))
        return monitor.await_report(_job(), _attempt(), _instance(), why, limit_s)

    ending = [{"cloud": "aws", "kind": "spot-interruption", "key": "k", "detail": {}, "seen_at": NOW}]
    advisory = [{"cloud": "aws", "kind": "rebalance-recommendation", "key": "r", "detail": {}, "seen_at": NOW}]
    assert says(WatchFor.NOTICE) is False                                  # nothing heard: the node's limit ends it
    assert says(WatchFor.NOTICE, notices=advisory) is False                # an advisory ends nothing
    assert says(WatchFor.NOTICE, notices=ending) is True
    assert says(WatchFor.NOTICE, notices=ending, launch_id="lother00") is False   # another launch's status
    drained = {"state": "running", "pid": 1, "exit_code": None, "drained": True}
    assert says(WatchFor.COMMIT, job=drained, pending_uploads=1) is False  # stopped, its upload not in yet
    assert says(WatchFor.COMMIT, job=drained, pending_uploads=0) is True
    assert says(WatchFor.COMMIT, job={"state": "exited", "pid": 1, "exit_code": 0}) is True
    # The event itself: a waiter already on the node returns when the notice lands, not at its limit.
    status.write_text(json.dumps(_status(launch_id="labc123")))
    heard: list[bool] = []
    waiter = threading.Thread(target=lambda: heard.append(
        monitor.await_report(_job(), _attempt(), _instance(), WatchFor.NOTICE, 600.0)))
    waiter.start()
    _poll(lambda: any("python3 -c" in c for c in machine.commands[-1:]), 60)
    status.write_text(json.dumps(_status(launch_id="labc123", notices=ending)))
    waiter.join(120)
    assert heard == [True]
