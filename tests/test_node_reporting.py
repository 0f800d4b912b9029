"""The outbound-only channel without clouds: a boot script run here (a local store, a command job) installs
the agent, which waits for orch's start, runs the job, reports its status and ships its output to the store;
the store monitor and bootstrapper read and drive it; ``orch logs`` prints the output from the store."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.engine.jobspec import jobspec_from_manifest
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.boot import boot_env, boot_files
from orchestrator.runtime.from_manifest import render_input_for
from orchestrator.runtime.node_facts import NodeSettings, launch_facts
from orchestrator.runtime.node_state import START_OBJECT, STATUS_OBJECT
from orchestrator.runtime.objectstore import StoreClient, parse_store
from orchestrator.runtime.startup import ManifestStartupRenderer, payload_size
from orchestrator.runtime.store_credentials import CredentialSource, credential_source, store_env
from orchestrator.runtime.store_monitor import StoreBootstrapper, StoreMonitor, StoreReader
from providers.base import Instance, InstanceState, Market, Offer
from providers.gpus import Interconnect

SECRET = "hf-secret-value-0123456789"


def _doc(command: str) -> dict:  # type: ignore[type-arg]
    """A job with no checkpoint store (manifests take only s3/gs/az stores): it reports to the daemon's
    ``state_store``, a local directory here."""
    return {"apiVersion": "orch/v1", "kind": "Job", "name": "tiny", "resources": {"gpu": "A100-80G", "count": 1},
            "run": {"launcher": "command", "command": command}, "secrets": ["HF_TOKEN"]}


def _job(doc: dict) -> JobRecord:  # type: ignore[type-arg]
    m = Manifest.model_validate(doc)
    now = datetime.now(UTC)
    return JobRecord(id=1, name="tiny", manifest=m, spec=jobspec_from_manifest(m, now), status=JobStatus.LAUNCHING,
                     desired_active=True, relaunch_count=0, spent_usd=0.0, created_at=now)


OFFER = Offer("lambda", "gpu_1x_a100", "us-west-2", None, "A100-80G", 1, 80, 30, 200, Interconnect.PCIE,
              Market.ON_DEMAND, 1.29, date(2026, 12, 1))
ATTEMPT = AttemptRecord(7, 1, "lnode00000001", AttemptState.PLANNED, OFFER)
INSTANCE = Instance("lambda", "i-1", "lnode00000001", "tester", InstanceState.RUNNING, "gpu_1x_a100", "us-west-2")


def _boot(tmp_path: Path, command: str) -> tuple[JobRecord, str, Path]:
    store = tmp_path / "store"
    job = _job(_doc(command))
    renderer = ManifestStartupRenderer({"lambda": NodeSettings(sample_interval_s=0.05, notice_interval_s=0.05,
                                                               report_interval_s=0.05)},
                                       environ={"HF_TOKEN": SECRET}, state_store=f"file://{store}")
    return job, renderer.render(job, ATTEMPT), store / "tiny" / ATTEMPT.launch_id


def _run_boot(script: str, root: Path) -> None:
    root.mkdir()
    (root / "boot.sh").write_text(script)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(root), "ORCH_ROOT": str(root)}
    done = subprocess.run(["bash", "boot.sh"], cwd=root, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _wait(cond, what: str, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
    """Poll a condition the node's processes make true (an event), bounded so a hang fails."""
    import time

    end = time.monotonic() + timeout_s
    while not (value := cond()):
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def test_a_booted_node_waits_for_orch_then_runs_reports_and_ships_its_output(tmp_path: Path) -> None:
    job, script, prefix = _boot(tmp_path, "echo hello from the job; echo token=${HF_TOKEN:+set} >&2")
    # The boot script carries the agent, its config (report prefix, wait for start) and the job's startup.sh.
    files = boot_files(script)
    config = json.loads(files["agent.json"])
    assert config["report"]["uri"] == f"file://{tmp_path}/store/tiny/{ATTEMPT.launch_id}"
    assert config["report"]["wait_for_start"] is True
    # The secret is not in the boot payload at all: it comes through the job's store with orch's go.
    assert SECRET not in script and "HF_TOKEN" not in boot_env(script)
    assert config["report"]["secrets"] is True
    root = tmp_path / "node"
    _run_boot(script, root)
    reader = StoreReader(state_store=f"file://{tmp_path}/store", environ={"HF_TOKEN": SECRET})
    monitor, boot = StoreMonitor(reader), StoreBootstrapper(reader)
    # Booted: the agent reports the job pending and waits; the start step's bootstrapper gives the go.
    status = _wait(lambda: reader.status(job, ATTEMPT), "the agent's first report")
    assert status.job.state.value == "pending" and not (prefix / START_OBJECT).exists()
    assert boot.start(job, ATTEMPT, INSTANCE) is False
    assert json.loads((prefix / START_OBJECT).read_text())["launch_id"] == ATTEMPT.launch_id
    _wait(lambda: boot.start(job, ATTEMPT, INSTANCE), "the job to start")
    report = _wait(lambda: (r := monitor.read(job, ATTEMPT, INSTANCE)) and r.exit_code is not None and r,
                   "the job's exit in the store")
    assert report.exit_code == 0
    logs = StoreClient(parse_store(f"file://{prefix}"))
    from orchestrator.app.logs import read_log

    out = _wait(lambda: b"token=set" in read_log(logs) and read_log(logs), "the shipped output")
    assert b"hello from the job" in out and b"token=set" in out
    assert read_log(logs, start=6).startswith(out[6:7])
    # The secret reached the job through secrets.json, which orch removed once the job ran; no file keeps it.
    assert not [p for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not [p for p in (tmp_path / "store").rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_a_gang_rank_booted_before_node_0_gets_its_address_from_orchs_go(tmp_path: Path) -> None:
    doc = {**_doc('echo "rendezvous at $ORCH_MASTER_ADDR"'), "resources": {"gpu": "A100-80G", "count": 1, "nodes": 2}}
    job = _job(doc)
    rank1 = replace(ATTEMPT, node_rank=1)
    renderer = ManifestStartupRenderer({"lambda": NodeSettings(sample_interval_s=0.05, notice_interval_s=0.05,
                                                               report_interval_s=0.05)},
                                       environ={"HF_TOKEN": SECRET}, state_store=f"file://{tmp_path}/store")
    script = renderer.render(job, rank1)
    startup = boot_files(script)["startup.sh"].decode()
    assert 'export ORCH_MASTER_ADDR="${ORCH_MASTER_ADDR_GIVEN:?' in startup
    assert "ORCH_MASTER_ADDR=127.0.0.1" not in startup
    _run_boot(script, tmp_path / "node")
    reader = StoreReader(state_store=f"file://{tmp_path}/store", environ={"HF_TOKEN": SECRET})
    _wait(lambda: reader.status(job, rank1), "rank 1's first report")
    # The start step passes node 0's address with the attempt (start.py); the go carries it to the node.
    boot = StoreBootstrapper(reader)
    _wait(lambda: boot.start(job, replace(rank1, master_addr="10.9.8.7"), INSTANCE), "rank 1 to start")
    from orchestrator.app.logs import read_log

    logs = StoreClient(parse_store(f"file://{tmp_path}/store/tiny/{rank1.launch_id}"))
    assert b"rendezvous at 10.9.8.7" in _wait(lambda: read_log(logs), "rank 1's output")


def test_the_boot_script_is_deterministic_and_a_second_run_starts_no_second_agent(tmp_path: Path) -> None:
    script = _boot(tmp_path, "sleep 30")[1]
    assert script == _boot(tmp_path, "sleep 30")[1]
    root = tmp_path / "node"
    _run_boot(script, root)
    work = root / ".orch" / "jobs" / "tiny"
    pid = int((work / "agent.pid").read_text())
    try:
        again = subprocess.run(["bash", "boot.sh"], cwd=root, capture_output=True, text=True, timeout=60,
                               env={"PATH": "/usr/bin:/bin", "HOME": str(root), "ORCH_ROOT": str(root)})
        assert again.returncode == 0 and "already runs" in again.stdout
        assert int((work / "agent.pid").read_text()) == pid
    finally:
        import os
        import signal

        os.kill(pid, signal.SIGKILL)


def test_the_agent_removes_the_secrets_it_read_from_the_store(tmp_path: Path) -> None:
    """secrets.json is read once by the agent at its job's start and removed by it; before, only orch removed it
    (once, when it saw the job running): a store error then left the job's secret values in the bucket for good."""
    from tests.support.agent import load_agent

    oa = load_agent()
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    (prefix / "start.json").write_text(json.dumps({"launch_id": "l1", "master_addr": None}))
    (prefix / "secrets.json").write_text(json.dumps({"HF_TOKEN": SECRET}))
    agent = oa.Agent({"report": {"kind": "local", "path": str(prefix), "secrets": True}},
                     sampler=oa.GpuSampler(1, run=lambda a, t: ""), poller=type("P", (), {"poll": lambda s: []})())
    assert agent.start_env() == {"HF_TOKEN": SECRET}
    assert not (prefix / "secrets.json").exists() and (prefix / "start.json").exists()
    assert agent.start_env() == {}              # read once


def test_a_reboot_whose_old_agent_pid_is_another_process_starts_the_agent(tmp_path: Path) -> None:
    """A rebooted machine (GCE reruns its startup-script) keeps agent.pid from its last boot; that pid may now
    be any process's. Before, the boot took it for this launch's agent and started none: the job never ran."""
    import signal

    script = _boot(tmp_path, "sleep 30")[1]
    root = tmp_path / "node"
    _run_boot(script, root)
    work = root / ".orch" / "jobs" / "tiny"
    old = int((work / "agent.pid").read_text())
    os.kill(old, signal.SIGKILL)                     # the reboot: the agent is gone...
    other = subprocess.Popen(["sleep", "60"])        # ...and its pid is now held by something else
    (work / "agent.pid").write_text(str(other.pid))
    try:
        again = subprocess.run(["bash", "boot.sh"], cwd=root, capture_output=True, text=True, timeout=60,
                               env={"PATH": "/usr/bin:/bin", "HOME": str(root), "ORCH_ROOT": str(root)})
        assert again.returncode == 0 and "already runs" not in again.stdout, again
        new = int((work / "agent.pid").read_text())
        assert new != other.pid and b"orch_agent.pyz" in Path(f"/proc/{new}/cmdline").read_bytes()
        os.kill(new, signal.SIGKILL)
    finally:
        other.kill()
        other.wait()


def test_a_secret_missing_from_the_daemon_environment_is_a_startup_script_error(tmp_path: Path) -> None:
    from orchestrator.engine.hooks import StartupScriptError

    job = _job(_doc("true"))
    with pytest.raises(StartupScriptError, match="HF_TOKEN"):
        ManifestStartupRenderer(environ={}).render(job, ATTEMPT)


def test_store_credentials_come_from_the_identity_where_the_machine_has_one() -> None:
    env = {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "RCLONE_CONFIG_ORCHAZ_KEY": "AZ",
           "UNRELATED": "x"}
    assert credential_source("s3://b/p", "aws", frozenset({"aws"})) is CredentialSource.IDENTITY
    assert credential_source("s3://b/p", "gcp", frozenset({"aws", "gcp"})) is CredentialSource.ENVIRONMENT
    assert credential_source("/tmp/x", "aws", frozenset()) is CredentialSource.LOCAL
    assert store_env(["s3://b/p"], "aws", frozenset({"aws"}), env) == {}
    assert store_env(["s3://b/p"], "runpod", frozenset({"aws"}), env) == {"AWS_ACCESS_KEY_ID": "AK",
                                                                           "AWS_SECRET_ACCESS_KEY": "SK"}
    assert store_env(["az://acct/c/p"], "azure", frozenset(), env) == {"RCLONE_CONFIG_ORCHAZ_KEY": "AZ"}


def test_a_job_without_a_checkpoint_store_reports_to_the_daemon_state_store(tmp_path: Path) -> None:
    job = _job(_doc("true"))
    facts = launch_facts(job, ATTEMPT, state_store=f"file://{tmp_path}/state")
    ri = render_input_for(job.manifest, facts)
    assert ri.report is not None and ri.report.uri == f"file://{tmp_path}/state/tiny/{ATTEMPT.launch_id}"
    assert render_input_for(job.manifest, replace(facts, state_store="")).report is None


def test_orch_logs_prints_a_job_output_from_its_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli.main import app
    from orchestrator.store import open_store, repo

    url = f"sqlite:///{tmp_path / 'orch.db'}"
    monkeypatch.setenv("ORCH_DATABASE_URL", url)
    monkeypatch.setenv("ORCH_CONFIG", str(tmp_path / "missing.yaml"))
    monkeypatch.setenv("ORCH_STATE_STORE", f"file://{tmp_path}/store")
    runner = CliRunner()
    result = runner.invoke(app, ["logs", "tiny"])
    assert result.exit_code == 1 and "no job named 'tiny'" in result.output
    store = open_store(url)
    m = Manifest.model_validate(_doc("true"))
    with store.transaction() as tx:
        repo.apply_jobs(tx, [repo.AppliedJob(m, "h")], now=datetime.now(UTC))
        job_id = repo.require_job(tx, "tiny").id or 0
    result = runner.invoke(app, ["logs", "tiny"])
    assert result.exit_code == 1 and "has no node 0 yet" in result.output
    with store.transaction() as tx:
        repo.create_attempt(tx, job_id, ATTEMPT.launch_id)
    store.close()
    result = runner.invoke(app, ["logs", "tiny"])
    assert result.exit_code == 1 and "no output from job 'tiny' node 0 yet" in result.output
    logs = StoreClient(parse_store(f"file://{tmp_path}/store/tiny/{ATTEMPT.launch_id}"))
    logs.put("logs/00000000", b"step 1\nstep 2\n")
    result = runner.invoke(app, ["logs", "tiny"])
    assert result.exit_code == 0 and result.output == "step 1\nstep 2\n"
    # -f prints what there is, then new output while the machine lives (here: --max-wait ends it).
    result = runner.invoke(app, ["logs", "tiny", "-f", "--poll", "0.05", "--max-wait", "0"])
    assert result.exit_code == 0 and result.output == "step 1\nstep 2\n"
    result = runner.invoke(app, ["logs", "tiny", "--node", "1"])
    # Not "no node 1 yet": a job of one node never has one.
    assert result.exit_code == 1 and "job 'tiny' runs on 1 node: --node 0" in result.output


def test_orch_logs_of_a_launch_that_got_no_machine_says_so_not_that_the_machine_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No store to read from, and the latest launch failed before the cloud gave it a machine (its instance
    row, written before the launch call, has no instance id): the line says that, with the launch's reason."""
    from orchestrator.cli.main import app
    from orchestrator.engine.states import AttemptState
    from orchestrator.store import open_store, repo

    url = f"sqlite:///{tmp_path / 'orch.db'}"
    monkeypatch.setenv("ORCH_DATABASE_URL", url)
    monkeypatch.setenv("ORCH_CONFIG", str(tmp_path / "missing.yaml"))
    monkeypatch.delenv("ORCH_STATE_STORE", raising=False)
    store = open_store(url)
    with store.transaction() as tx:
        repo.apply_jobs(tx, [repo.AppliedJob(Manifest.model_validate(_doc("true")), "h")], now=datetime.now(UTC))
        job_id = repo.require_job(tx, "tiny").id or 0
        attempt = repo.create_attempt(tx, job_id, ATTEMPT.launch_id)
        repo.record_instance(tx, repo.InstanceRecord(provider="runpod", launch_id=ATTEMPT.launch_id, owner="t",
                                                     job_id=job_id, state=InstanceState.PENDING, price_hr=1.0))
        repo.transition_attempt(tx, attempt, AttemptState.LAUNCH_REQUESTED)
    runner = CliRunner()
    result = runner.invoke(app, ["logs", "tiny"])
    assert result.exit_code == 1 and "still being launched" in result.output
    with store.transaction() as tx:
        repo.transition_attempt(tx, repo.get_attempt_by_launch_id(tx, ATTEMPT.launch_id), AttemptState.FAILED,
                                reason="runpod: RunPod has no GPU type for L4-24G")
    store.close()
    result = runner.invoke(app, ["logs", "tiny"])
    assert result.exit_code == 1 and "machine is gone" not in result.output
    assert "latest launch ended without a machine (failed: runpod: RunPod has no GPU type" in result.output


def test_follow_yields_new_output_until_the_machine_ends() -> None:
    from orchestrator.app.logs import follow_log

    shipped = [b"a", b"ab", b"abc", b"abc"]
    running = iter([True, True, True, False])
    reads = iter(shipped)
    got = list(follow_log(lambda start: next(reads)[start:], lambda: next(running), poll_s=0, sleep=lambda s: None))
    assert got == [b"a", b"b", b"c"]


def test_store_client_on_s3_through_rclone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    if shutil.which("rclone") is None:
        pytest.skip("rclone is not installed (apt-get install rclone)")
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="t",
                     aws_secret_access_key="t").create_bucket(Bucket="orch-node-test")
        env = {"PATH": "/usr/bin:/bin", "AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "HOME": str(tmp_path)}
        client = StoreClient(parse_store("s3://orch-node-test/job/_orch/l1", endpoint), environ=env)
        assert client.get(STATUS_OBJECT) is None and client.list("logs") == []
        client.put(STATUS_OBJECT, b'{"v": 1}\n')
        client.put("logs/00000000", b"x")
        assert client.get(STATUS_OBJECT) == b'{"v": 1}\n' and client.list("logs") == ["00000000"]
    finally:
        server.stop()


class _Recording:
    """A stand-in channel (Monitor and Bootstrapper) that records which machines it was asked about."""

    def __init__(self, answer):  # type: ignore[no-untyped-def]
        self.answer, self.asked = answer, []

    def read(self, job, attempt, instance):  # type: ignore[no-untyped-def]
        self.asked.append(instance.provider)
        return self.answer

    def start(self, job, attempt, instance):  # type: ignore[no-untyped-def]
        self.asked.append(instance.provider)
        return self.answer


def test_ssh_hosts_go_over_ssh_and_cloud_machines_through_the_store(tmp_path: Path) -> None:
    from orchestrator.engine.hooks import AgentReport
    from orchestrator.runtime.store_monitor import CombinedMonitor, RoutingBootstrapper

    job = _job(_doc("true"))
    ssh_host = replace(INSTANCE, provider="ssh", instance_id="box1")
    reader = StoreReader(state_store=f"file://{tmp_path}/store")
    ssh = _Recording(True)
    routing = RoutingBootstrapper(reader, ssh, ssh_key=False)
    assert routing.start(job, ATTEMPT, ssh_host) is True and ssh.asked == ["ssh"]
    # A cloud machine that has not reported yet is not started, and SSH is never asked about it.
    assert routing.start(job, ATTEMPT, INSTANCE) is False and ssh.asked == ["ssh"]
    # No store for the job and orch has a key: SSH starts the cloud machine too (it booted with no script).
    no_store = StoreReader()
    assert RoutingBootstrapper(no_store, ssh, ssh_key=True).start(job, ATTEMPT, INSTANCE) is True
    assert ssh.asked == ["ssh", "lambda"]
    # The monitor: the store first; where it has nothing, the second channel.
    second = _Recording(AgentReport(gpu_util_pct=(50.0,)))
    assert CombinedMonitor(StoreMonitor(reader), second).read(job, ATTEMPT, INSTANCE) == second.answer
    StoreClient(parse_store(f"file://{tmp_path}/store/tiny/{ATTEMPT.launch_id}")).put(
        STATUS_OBJECT, _status_doc().encode())
    report = CombinedMonitor(StoreMonitor(reader), second).read(job, ATTEMPT, INSTANCE)
    assert report is not None and report.exit_code == 0 and second.asked == ["lambda"]


def _status_doc() -> str:
    import time

    now = time.time()
    return json.dumps({
        "version": 1, "job_name": "tiny", "node_rank": 0,
        "agent": {"pid": 1, "started_at": now, "heartbeat": now},
        "job": {"state": "exited", "pid": 2, "exit_code": 0, "started_at": now, "ended_at": now},
        "gpu": {"available": False, "error": "nvidia-smi not found", "samples": [],
                "summary": {"samples": 0, "gpus": 0, "window_s": 0.0, "mean_util": None, "max_util": None,
                            "last_mean_util": None, "max_mem_used_mib": None}},
        "notices": [], "checkpoint_requests": [], "checkpoints": [], "latest": None, "errors": []})


def test_a_boot_script_over_ec2s_user_data_limit_is_refused_for_aws(tmp_path: Path) -> None:
    from orchestrator.engine.hooks import StartupScriptError

    job = _job(_doc("true"))
    aws = replace(ATTEMPT, offer=replace(OFFER, provider="aws"))
    fits = ManifestStartupRenderer(environ={"HF_TOKEN": SECRET}, state_store=f"file://{tmp_path}")
    assert payload_size("aws", fits.render(job, aws)) <= 16 * 1024
    # Random bytes do not compress: 16 KB of them (32 KB of hex) push the script over 16 KB, gzip'd or not.
    # A job with no store carries its secrets in the payload (the only way left to it).
    big = {"HF_TOKEN": os.urandom(16384).hex()}
    huge = ManifestStartupRenderer(environ=big, state_store="")
    with pytest.raises(StartupScriptError, match="aws takes 16384"):
        huge.render(job, aws)
    assert huge.render(job, ATTEMPT)           # Lambda takes far more
    # With a store, the secret goes through it: the payload does not grow.
    assert payload_size("aws", ManifestStartupRenderer(environ=big, state_store=f"file://{tmp_path}").render(
        job, aws)) <= 16 * 1024


def test_orchs_checkpoint_now_makes_the_agent_checkpoint_then_stop_the_job(tmp_path: Path) -> None:
    """A job's budget spent: orch puts ``checkpoint-now.json`` in the launch's report prefix
    (``StoreBootstrapper.ask_checkpoint``); the agent takes it as an interrupting notice: it asks the job to
    checkpoint, stops the job once that checkpoint is complete, uploads it, and reports the notice."""
    from orchestrator.runtime.node_state import CHECKPOINT_NOW_OBJECT
    from orchestrator.runtime.status import NoticeKind, parse_status
    from tests.test_agent import Clock, NoNotices, _checkpoint, _config, _long_job, _smi, oa

    job = _job(_doc("x"))
    prefix = tmp_path / "store" / "tiny" / ATTEMPT.launch_id
    cfg = _config(tmp_path, store=tmp_path / "ckpt-store", command=_long_job(tmp_path),
                  report={"kind": "local", "path": str(prefix), "uri": f"file://{prefix}", "interval_s": 10})
    clock = Clock()
    agent = oa.Agent(cfg, clock=clock, sampler=oa.GpuSampler(3, _smi("")), poller=NoNotices())
    agent.start_job()
    try:
        agent.tick()
        assert agent.notices == [] and not (tmp_path / "ckpt" / "CHECKPOINT_NOW").exists()
        boot = StoreBootstrapper(StoreReader(state_store=f"file://{tmp_path}/store"))
        assert boot.ask_checkpoint(job, ATTEMPT, INSTANCE, "budget $1.00 reached") is True
        assert json.loads((prefix / CHECKPOINT_NOW_OBJECT).read_text())["reason"] == "budget $1.00 reached"
        clock.t += 10
        agent.tick()                         # asked: the job is told to checkpoint, and keeps running until it did
        assert [n["kind"] for n in agent.notices] == ["orch-stop"]
        assert (tmp_path / "ckpt" / "CHECKPOINT_NOW").exists() and agent.job["state"] == "running"
        _checkpoint(tmp_path / "ckpt", 9)
        clock.t += 1
        agent.tick()                         # complete: stopped, and the checkpoint is uploaded
        assert agent.job.get("drained") is True and agent.latest == "step-9"
        clock.t += 10
        agent.tick()
        assert len(agent.notices) == 1       # asked once, heard once
    finally:
        agent.stop_job(9)
    [notice] = parse_status((tmp_path / "status.json").read_bytes()).notices
    assert notice.kind is NoticeKind.ORCH_STOP and notice.kind.ends_attempt
