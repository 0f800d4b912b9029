"""The on-node agent (orchestrator/runtime/templates/agent/orch_agent/, shipped as orch_agent.pyz): GPU sampling,
notices, checkpoint-now, uploads with a LATEST pointer that only follows completed uploads, atomic status, job
supervision."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runtime.agent_app import agent_zipapp
from orchestrator.runtime.status import JobState, StatusFormatError, parse_status
from tests.fakes.metadata import metadata_server
from tests.support.agent import AGENT_DIR, load_agent

oa = load_agent()


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class NoNotices:
    def poll(self) -> list[dict[str, Any]]:
        return []


class ScriptedPoller:
    def __init__(self) -> None:
        self.current: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        return list(self.current)


def _wait(cond: Callable[[], bool], what: str, deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _smi(text: str) -> Callable[[list[str], float], str]:
    return lambda argv, timeout: text


def _config(tmp: Path, store: Path | None = None, notify: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {"job_name": "t", "status_path": str(tmp / "status.json"), "command": ["true"],
                           "job_log": str(tmp / "job.log"), "sample_interval_s": 5, "notice_interval_s": 5,
                           "window": 3, "cloud": "none", "metadata": {}, "checkpoint": None}
    if store is not None:
        cfg["checkpoint"] = {"dir": str(tmp / "ckpt"), "marker": "COMPLETE",
                             "notify": notify or {"via": "file", "file": str(tmp / "ckpt" / "CHECKPOINT_NOW"),
                                                  "signal": "SIGUSR1"},
                             "store": {"kind": "local", "path": str(store), "uri": f"file://{store}", "env": {}}}
    cfg.update(extra)
    return cfg


def _agent(cfg: dict[str, Any], clock: Clock | None = None, poller: Any = None, store: Any = None,
           smi: str = "0, 50, 100, 200, 30\n") -> Any:
    return oa.Agent(cfg, clock=clock or Clock(), sampler=oa.GpuSampler(int(cfg["window"]), _smi(smi)),
                    poller=poller or NoNotices(), store=store)


def _checkpoint(root: Path, step: int, complete: bool = True) -> Path:
    d = root / f"step-{step}"
    d.mkdir(parents=True)
    (d / "model.pt").write_bytes(b"weights-%d" % step)
    (d / "optim.pt").write_bytes(b"optim-%d" % step)
    if complete:
        (d / "COMPLETE").write_text(f"{step}\n")
    return d


# --- nvidia-smi ----------------------------------------------------------------------------------

def test_parse_nvidia_smi_handles_na_and_noise() -> None:
    text = "0, 87, 30123, 81559, 312.45\n1, [N/A], 10, 81559, [N/A]\n2, 5, [Not Supported], 81559, 60.1\n" \
           "No devices were found\n\n"
    gpus = oa.parse_nvidia_smi(text)
    assert [g["index"] for g in gpus] == [0, 1, 2]
    assert gpus[0] == {"index": 0, "util": 87.0, "mem_used_mib": 30123.0, "mem_total_mib": 81559.0, "power_w": 312.45}
    assert gpus[1]["util"] is None and gpus[1]["power_w"] is None and gpus[1]["mem_used_mib"] == 10.0
    assert gpus[2]["mem_used_mib"] is None


def test_rolling_window_keeps_the_last_samples_and_summarises() -> None:
    outputs = iter([f"0, {u}, {u * 10}, 1000, 1\n1, [N/A], 5, 1000, 1\n" for u in (10, 20, 30, 40)])
    sampler = oa.GpuSampler(3, lambda argv, timeout: next(outputs))
    for t in (1.0, 2.0, 3.0, 4.0):
        sampler.sample(t)
    assert [s["time"] for s in sampler.samples] == [2.0, 3.0, 4.0]
    s = sampler.summary()
    assert s["samples"] == 3 and s["gpus"] == 2 and s["window_s"] == 2.0
    assert s["mean_util"] == 30.0 and s["max_util"] == 40.0 and s["last_mean_util"] == 40.0
    assert s["max_mem_used_mib"] == 400.0


def test_missing_nvidia_smi_is_reported_not_raised() -> None:
    def missing(argv: list[str], timeout: float) -> str:
        raise FileNotFoundError(argv[0])

    sampler = oa.GpuSampler(5, missing)
    sampler.sample(1.0)
    assert sampler.available is False and "not found" in sampler.error
    assert sampler.summary()["mean_util"] is None


def test_sampling_follows_the_injected_clock(tmp_path: Path) -> None:
    clock = Clock(100.0)
    agent = _agent(_config(tmp_path), clock)
    agent.tick()
    clock.t = 102.0
    agent.tick()  # before the 5 s interval: no new sample
    clock.t = 105.0
    agent.tick()
    assert [s["time"] for s in agent.sampler.samples] == [100.0, 105.0]


# --- notices -------------------------------------------------------------------------------------

@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_notice_detected_against_fake_metadata(cloud: str) -> None:
    with metadata_server() as (base, state):
        poller = oa.NoticePoller(cloud, {cloud: base})
        assert poller.poll() == []
        {"aws": state.raise_aws_spot, "gcp": state.raise_gcp_preempted, "azure": state.raise_azure_preempt}[cloud]()
        notices = poller.poll()
    assert len(notices) == 1
    n = notices[0]
    assert n["cloud"] == cloud
    assert n["kind"] == {"aws": "spot-interruption", "gcp": "preempted", "azure": "preempt"}[cloud]
    if cloud == "aws":
        assert n["detail"] == {"action": "terminate", "time": "2026-12-02T12:00:00Z"}
        assert any(r.startswith("PUT /latest/api/token") for r in state.requests)  # IMDSv2, not v1
    if cloud == "azure":
        assert n["detail"]["EventType"] == "Preempt"


def test_aws_rebalance_recommendation_is_a_notice() -> None:
    with metadata_server() as (base, state):
        poller = oa.NoticePoller("aws", {"aws": base})
        state.raise_aws_rebalance()
        notices = poller.poll()
    assert [n["kind"] for n in notices] == ["rebalance-recommendation"]


def test_gcp_maintenance_event_is_polled_as_an_advisory() -> None:
    with metadata_server() as (base, state):
        poller = oa.NoticePoller("gcp", {"gcp": base})
        assert poller.poll() == []                       # maintenance-event NONE
        state.raise_gcp_maintenance("TERMINATE_ON_HOST_MAINTENANCE")
        notices = poller.poll()
    assert [(n["kind"], n["key"]) for n in notices] == [
        ("maintenance-event", "gcp:maintenance:TERMINATE_ON_HOST_MAINTENANCE")]
    assert any("/instance/maintenance-event" in r for r in state.requests)


@pytest.mark.parametrize("advisory", [
    {"cloud": "aws", "kind": "rebalance-recommendation", "key": "aws:rebalance:t", "detail": {}},
    {"cloud": "gcp", "kind": "maintenance-event", "key": "gcp:maintenance:MIGRATE", "detail": {}},
])
def test_an_advisory_asks_for_a_checkpoint_and_never_drains_or_ends(tmp_path: Path, advisory: dict) -> None:
    from orchestrator.runtime.ssh_monitor import report_from_status
    from orchestrator.runtime.status import NoticeKind

    clock, poller = Clock(), ScriptedPoller()
    agent = _agent(_config(tmp_path, store=tmp_path / "store", command=_long_job(tmp_path)), clock, poller)
    agent.start_job()
    try:
        poller.current = [advisory]
        clock.t += 5
        agent.tick()
        assert (tmp_path / "ckpt" / "CHECKPOINT_NOW").exists()      # a checkpoint now
        _checkpoint(tmp_path / "ckpt", 7)
        clock.t += 1
        agent.tick()
        assert agent.job["state"] == "running" and not agent.job.get("drained")   # not drained
    finally:
        agent.stop_job(9)
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert [n.kind for n in status.notices] == [NoticeKind(advisory["kind"])]
    assert not status.preempting and status.advisories == status.notices          # shown, not an ending
    assert report_from_status(status, now=clock.t).notice is None                 # the engine sees no preemption


def test_a_failed_maintenance_poll_never_hides_a_preemption(monkeypatch: pytest.MonkeyPatch) -> None:
    with metadata_server() as (base, state):
        state.raise_gcp_preempted()
        poller = oa.NoticePoller("gcp", {"gcp": base})
        real = oa.notices._http

        def no_maintenance(method: str, url: str, headers: dict, timeout: float) -> tuple[int, str]:
            return (404, "") if url.endswith("/maintenance-event") else real(method, url, headers, timeout)

        monkeypatch.setattr(oa.notices, "_http", no_maintenance)
        assert [n["kind"] for n in poller.poll()] == ["preempted"]


def test_notice_kinds_parse_typed() -> None:
    from orchestrator.runtime.status import NoticeKind

    ending = {"spot-interruption", "preempted", "preempt", "terminate", "from-a-newer-agent"}
    assert {k for k in ending if NoticeKind.parse(k).ends_attempt} == ending
    assert not NoticeKind.parse("rebalance-recommendation").ends_attempt
    assert not NoticeKind.parse("maintenance-event").ends_attempt


def test_azure_non_preempt_events_are_ignored() -> None:
    with metadata_server() as (base, state):
        state.azure_events.append({"EventId": "x", "EventType": "Reboot", "EventStatus": "Scheduled"})
        assert oa.NoticePoller("azure", {"azure": base}).poll() == []


def test_clouds_without_notices_poll_nothing() -> None:
    assert oa.NoticePoller("none", {}).poll() == []


def test_unreachable_metadata_is_an_error_entry_not_a_crash(tmp_path: Path) -> None:
    agent = _agent(_config(tmp_path), poller=oa.NoticePoller("gcp", {"gcp": "http://127.0.0.1:9"}, timeout=0.5))
    agent.tick()
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert status.notices == () and any(e.startswith("notice") for e in status.errors)


def test_notice_requests_checkpoint_once_by_file(tmp_path: Path) -> None:
    clock = Clock()
    poller = ScriptedPoller()
    agent = _agent(_config(tmp_path, store=tmp_path / "store"), clock, poller)
    agent.tick()
    request = tmp_path / "ckpt" / "CHECKPOINT_NOW"
    assert not request.exists()
    poller.current = [{"cloud": "aws", "kind": "spot-interruption", "key": "aws:k1", "detail": {}}]
    clock.t += 5
    agent.tick()
    assert request.exists()
    request.unlink()  # the training script consumes it
    clock.t += 5
    agent.tick()  # same notice still showing: no second request
    assert not request.exists()
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert [n.kind for n in status.notices] == ["spot-interruption"]
    assert [(r.via, r.reason) for r in status.checkpoint_requests] == [("file", "aws spot-interruption")]


def test_checkpoint_now_signal_reaches_the_training_process(tmp_path: Path) -> None:
    # Driven by events, not by polling windows: the child says it is ready through a FIFO (the test's read
    # blocks until the handler is installed), and the exit code is the child's answer to the signal.
    child = tmp_path / "child.py"
    got = tmp_path / "got-signal"
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    child.write_text(textwrap.dedent(f"""
        import signal, sys, time
        def on(sig, frame):
            open({str(got)!r}, "w").write("yes")
            sys.exit(3)
        signal.signal(signal.SIGUSR1, on)
        with open({str(ready)!r}, "w") as fh:
            fh.write("1")
        while True:
            time.sleep(0.05)
    """))
    # As the rendered script does: the launcher shell ignores the signal, the trainer handles it.
    cmd = ["bash", "-c", f"trap '' USR1; {sys.executable} {child}; exit $?"]
    notify = {"via": "signal", "signal": "SIGUSR1", "file": ""}
    agent = _agent(_config(tmp_path, store=tmp_path / "store", notify=notify, command=cmd))
    agent.start_job()
    try:
        assert ready.read_text() == "1"          # blocks until the child has installed its handler
        agent.request_checkpoint("test")
        assert agent.proc.wait() == 3            # only the handler exits with 3
        agent.tick()
    finally:
        agent.stop_job(9)
    assert got.read_text() == "yes"
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert status.job.state is JobState.EXITED and status.job.exit_code == 3  # bash outlived the signal
    assert [r.via for r in status.checkpoint_requests] == ["signal"]


# --- checkpoints and LATEST ----------------------------------------------------------------------

def test_completed_checkpoint_is_uploaded_then_latest_moves(tmp_path: Path) -> None:
    store = tmp_path / "store"
    agent = _agent(_config(tmp_path, store=store))
    _checkpoint(tmp_path / "ckpt", 2)
    _checkpoint(tmp_path / "ckpt", 4, complete=False)  # still being written
    agent.tick()
    assert (store / "LATEST").read_text() == "step-2\n"
    assert (store / "step-2" / "model.pt").read_bytes() == b"weights-2"
    assert (store / "step-2" / "COMPLETE").exists()
    assert not (store / "step-4").exists()
    (tmp_path / "ckpt" / "step-4" / "COMPLETE").write_text("4\n")
    agent.tick()
    assert (store / "LATEST").read_text() == "step-4\n"
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert [(c.name, c.step, c.uri) for c in status.checkpoints] == [
        ("step-2", 2, f"file://{store}/step-2"), ("step-4", 4, f"file://{store}/step-4")]
    assert status.latest == "step-4"


FAKE_RCLONE = """#!{python}
# Stands in for rclone over local paths; with FAIL_COPY set, "copy" copies one file then fails.
import os, shutil, sys
cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "copy":
    src, dst = args[0], args[1]
    os.makedirs(dst, exist_ok=True)
    names = sorted(n for n in os.listdir(src) if n != "COMPLETE")
    for i, n in enumerate(names):
        if os.environ.get("FAIL_COPY") and i == 1:
            sys.stderr.write("connection reset by peer\\n"); sys.exit(1)
        shutil.copy(os.path.join(src, n), os.path.join(dst, n))
elif cmd == "copyto":
    os.makedirs(os.path.dirname(args[1]), exist_ok=True); shutil.copy(args[0], args[1])
elif cmd == "cat":
    try:
        sys.stdout.write(open(args[0]).read())
    except FileNotFoundError:
        sys.exit(3)
"""


def test_failed_partial_upload_never_becomes_latest(tmp_path: Path) -> None:
    fake = tmp_path / "fake-rclone"
    fake.write_text(FAKE_RCLONE.format(python=sys.executable))
    fake.chmod(0o755)
    remote = tmp_path / "remote"
    cfg = _config(tmp_path, store=remote)
    cfg["checkpoint"]["store"] = {"kind": "rclone", "path": str(remote), "uri": "s3://b/p", "env": {}}
    cfg["rclone"] = str(fake)
    agent = oa.Agent(cfg, clock=Clock(), sampler=oa.GpuSampler(3, _smi("")), poller=NoNotices())
    _checkpoint(tmp_path / "ckpt", 2)
    agent.tick()
    assert (remote / "LATEST").read_text() == "step-2\n"

    agent.store.env["FAIL_COPY"] = "1"  # the environment rclone runs with
    _checkpoint(tmp_path / "ckpt", 4)
    agent.tick()
    assert (remote / "step-4" / "model.pt").exists()  # half of it got there ...
    assert not (remote / "step-4" / "COMPLETE").exists()  # ... but it is not marked complete
    assert (remote / "LATEST").read_text() == "step-2\n"  # and LATEST did not move
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert status.latest == "step-2" and [c.name for c in status.checkpoints] == ["step-2"]
    assert any("upload step-4" in e and "connection reset" in e for e in status.errors)

    del agent.store.env["FAIL_COPY"]
    agent.tick()  # retried on the next tick
    assert (remote / "LATEST").read_text() == "step-4\n"
    assert (remote / "step-4" / "COMPLETE").exists()


@pytest.mark.skipif(shutil.which("rclone") is None, reason="rclone is not installed")
def test_real_rclone_upload_to_a_local_remote(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    cfg = _config(tmp_path, store=remote)
    cfg["checkpoint"]["store"] = {"kind": "rclone", "path": str(remote), "uri": "s3://b/p", "env": {}}
    agent = oa.Agent(cfg, clock=Clock(), sampler=oa.GpuSampler(3, _smi("")), poller=NoNotices())
    _checkpoint(tmp_path / "ckpt", 7)
    agent.tick()
    assert sorted(os.listdir(remote / "step-7")) == ["COMPLETE", "model.pt", "optim.pt"]
    assert (remote / "LATEST").read_text() == "step-7\n"
    assert agent.latest == "step-7"


def test_latest_never_moves_backwards(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "LATEST").write_text("step-9\n")  # an earlier life of this job got further
    agent = _agent(_config(tmp_path, store=store))
    _checkpoint(tmp_path / "ckpt", 4)
    agent.tick()
    assert (store / "step-4" / "COMPLETE").exists()
    assert (store / "LATEST").read_text() == "step-9\n"


def test_restarted_agent_does_not_reupload(tmp_path: Path) -> None:
    store = tmp_path / "store"
    cfg = _config(tmp_path, store=store)
    _agent(cfg).tick()
    _checkpoint(tmp_path / "ckpt", 3)
    _agent(cfg).tick()
    (store / "step-3" / "model.pt").write_bytes(b"marker-of-first-upload")
    again = _agent(cfg)
    again.tick()
    assert (store / "step-3" / "model.pt").read_bytes() == b"marker-of-first-upload"
    assert [c["name"] for c in again.checkpoints] == ["step-3"]


# --- status file and supervision -----------------------------------------------------------------

def test_status_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = _agent(_config(tmp_path))
    agent.tick()
    before = (tmp_path / "status.json").read_bytes()
    assert parse_status(before).heartbeat == 1000.0

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    agent.clock.t = 2000.0
    with pytest.raises(OSError):
        agent.write_status()
    assert (tmp_path / "status.json").read_bytes() == before  # readers never see a torn file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]  # no temp left behind


def test_job_exit_code_is_supervised(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    cmd = ["bash", "-c", f"mkdir -p {ckpt}/step-5 && echo w > {ckpt}/step-5/model.pt && "
                         f"echo 5 > {ckpt}/step-5/COMPLETE && echo out && exit 7"]
    agent = oa.Agent(_config(tmp_path, store=tmp_path / "store", command=cmd), clock=Clock(),
                     sampler=oa.GpuSampler(3, _smi("")), poller=NoNotices(), sleep=lambda s: time.sleep(0.01))
    assert agent.run() == 0
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert status.job.state is JobState.EXITED and status.job.exit_code == 7 and status.job.pid
    assert status.latest == "step-5"  # the last tick uploaded what the job wrote before exiting
    assert (tmp_path / "job.log").read_text() == "out\n"


def test_job_that_cannot_start_is_failed(tmp_path: Path) -> None:
    agent = _agent(_config(tmp_path, command=[str(tmp_path / "no-such-binary")]))
    agent.start_job()
    agent.tick()
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert status.job.state is JobState.FAILED and status.job.exit_code is None


def test_cli_once_writes_a_parseable_status(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    (tmp_path / "agent.json").write_text(json.dumps(cfg))
    app = tmp_path / "orch_agent.pyz"           # what orch ships: the zipapp, run by its path
    app.write_bytes(agent_zipapp())
    out = subprocess.run([sys.executable, str(app), "--config", str(tmp_path / "agent.json"), "--once",
                          "--no-job"], capture_output=True, text=True, timeout=60, env={"PATH": "/nonexistent"})
    assert out.returncode == 0, out.stderr
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert status.job.state is JobState.PENDING
    assert status.gpu_available is False and status.gpu_error == "nvidia-smi not found"


def test_status_parser_rejects_foreign_documents() -> None:
    with pytest.raises(StatusFormatError):
        parse_status(b"not json")
    with pytest.raises(StatusFormatError):
        parse_status(json.dumps({"version": 99}))
    with pytest.raises(StatusFormatError):
        parse_status(json.dumps({"version": 1, "agent": {}}))


def test_agent_uses_only_the_standard_library() -> None:
    import ast

    names: set[str] = set()
    for path in sorted(AGENT_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        names |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        # Relative imports (level > 0) are the package's own modules.
        names |= {n.module.split(".")[0] for n in ast.walk(tree)
                  if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
    names.remove("orch_agent")          # __main__.py's import of the package by name (the zipapp's entry)
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, names - set(sys.stdlib_module_names)


@pytest.fixture
def moto_s3(tmp_path: Path) -> Any:
    server = Path(sys.executable).parent / "moto_server"
    if shutil.which("rclone") is None or not server.exists():
        pytest.skip("needs rclone and moto_server")
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return True
        except OSError:
            return False

    try:
        _wait(up, "moto_server", 30)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_upload_to_s3_compatible_store_via_rclone(tmp_path: Path, moto_s3: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    from orchestrator.runtime.objectstore import parse_store

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)  # rclone refuses a CA bundle with its own transport
    s3 = boto3.client("s3", endpoint_url=moto_s3, region_name="us-east-1")
    s3.create_bucket(Bucket="orch-ckpt")
    target = parse_store("s3://orch-ckpt/jobs/tiny", endpoint=moto_s3)
    cfg = _config(tmp_path, store=tmp_path / "unused")
    cfg["checkpoint"]["store"] = {"kind": target.kind.value, "path": target.path, "uri": target.uri,
                                  "env": dict(target.env)}
    agent = oa.Agent(cfg, clock=Clock(), sampler=oa.GpuSampler(3, _smi("")), poller=NoNotices())
    _checkpoint(tmp_path / "ckpt", 8)
    agent.tick()
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="orch-ckpt")["Contents"])
    assert keys == ["jobs/tiny/LATEST", "jobs/tiny/step-8/COMPLETE", "jobs/tiny/step-8/model.pt",
                    "jobs/tiny/step-8/optim.pt"]
    assert s3.get_object(Bucket="orch-ckpt", Key="jobs/tiny/LATEST")["Body"].read() == b"step-8\n"
    assert agent.store.read_latest() == "step-8"


# --- multi-node checkpoints: every node's part, then node 0 commits ---------------------------------

def _node(tmp: Path, rank: int, store_cfg: dict[str, Any] | None = None, nodes: int = 2) -> Any:
    home = tmp / f"node-{rank}"
    home.mkdir()
    cfg = _config(home, store=tmp / "store", node_rank=rank, nodes=nodes)
    if store_cfg is not None:
        cfg["checkpoint"]["store"] = store_cfg
    return oa.Agent(cfg, clock=Clock(), sampler=oa.GpuSampler(3, _smi("")), poller=NoNotices())


def _part(home: Path, step: int, rank: int) -> None:
    d = home / "ckpt" / f"step-{step}"
    d.mkdir(parents=True)
    if rank == 0:
        (d / "model.pt").write_bytes(b"weights-%d" % step)
    (d / f"rng-rank{rank}.pt").write_bytes(b"rng-%d-%d" % (rank, step))
    (d / "COMPLETE").write_text(f"{step}\n")


def test_multi_node_checkpoint_is_latest_only_once_every_node_uploaded_its_part(tmp_path: Path) -> None:
    store = tmp_path / "store"
    node0, node1 = _node(tmp_path, 0), _node(tmp_path, 1)
    _part(tmp_path / "node-0", 5, 0)
    node0.tick()
    # Node 0's files are in, but node 1's are not: not complete, not LATEST.
    assert (store / "step-5" / "model.pt").exists() and (store / "step-5" / "COMPLETE.node-0").exists()
    assert not (store / "step-5" / "COMPLETE").exists() and not (store / "LATEST").exists()
    assert node0.checkpoints == []
    _part(tmp_path / "node-1", 5, 1)
    node1.tick()
    assert (store / "step-5" / "rng-rank1.pt").exists() and (store / "step-5" / "COMPLETE.node-1").exists()
    assert not (store / "LATEST").exists()            # node 1 never moves LATEST
    assert node1.checkpoints == [] and node1.parts == ["step-5"]
    node0.tick()
    assert (store / "step-5" / "COMPLETE").exists() and (store / "LATEST").read_text() == "step-5\n"
    assert [c["name"] for c in node0.checkpoints] == ["step-5"]
    assert sorted(os.listdir(store / "step-5")) == ["COMPLETE", "COMPLETE.node-0", "COMPLETE.node-1",
                                                   "model.pt", "rng-rank0.pt", "rng-rank1.pt"]


def test_multi_node_node_0_does_not_reupload_while_waiting(tmp_path: Path) -> None:
    node0 = _node(tmp_path, 0, nodes=3)
    _part(tmp_path / "node-0", 5, 0)
    node0.tick()
    (tmp_path / "store" / "step-5" / "model.pt").write_bytes(b"marked")
    node0.tick()
    assert (tmp_path / "store" / "step-5" / "model.pt").read_bytes() == b"marked"
    assert node0.parts == ["step-5"] and node0.latest is None


@pytest.mark.skipif(shutil.which("rclone") is None, reason="rclone is not installed")
def test_multi_node_commit_through_real_rclone(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    store_cfg = {"kind": "rclone", "path": str(remote), "uri": "s3://b/p", "env": {}}
    node0, node1 = _node(tmp_path, 0, store_cfg), _node(tmp_path, 1, store_cfg)
    _part(tmp_path / "node-0", 3, 0)
    _part(tmp_path / "node-1", 3, 1)
    node0.tick()
    assert not (remote / "LATEST").exists() and not node0.store.has("step-3/COMPLETE.node-1")
    node1.tick()
    assert node0.store.has("step-3/COMPLETE.node-1")
    node0.tick()
    assert (remote / "LATEST").read_text() == "step-3\n" and (remote / "step-3" / "COMPLETE").exists()


# --- drain after a notice -------------------------------------------------------------------------------

def _long_job(tmp_path: Path) -> list[str]:
    # Keeps "training" until stopped; the trap stands in for the rendered script's ignoring of the notify signal.
    return ["bash", "-c", "trap '' USR1; exec sleep 60"]


def test_a_noticed_job_is_stopped_once_its_notice_checkpoint_is_committed(tmp_path: Path) -> None:
    clock, poller = Clock(), ScriptedPoller()
    agent = _agent(_config(tmp_path, store=tmp_path / "store", command=_long_job(tmp_path)), clock, poller)
    agent.start_job()
    try:
        _checkpoint(tmp_path / "ckpt", 5)
        agent.tick()                                 # a periodic checkpoint before any notice: keeps running
        assert agent.job["state"] == "running" and not agent.job.get("drained")
        poller.current = [{"cloud": "aws", "kind": "spot-interruption", "key": "aws:k1", "detail": {}}]
        clock.t += 5
        agent.tick()                                 # notice: checkpoint requested, none committed since
        assert agent.job["state"] == "running" and (tmp_path / "ckpt" / "CHECKPOINT_NOW").exists()
        _checkpoint(tmp_path / "ckpt", 7)            # the job's answer to the request
        clock.t += 1
        agent.tick()                                 # stopped at once, then the upload
        assert agent.latest == "step-7" and agent.job["drained"] is True
        assert json.loads((tmp_path / "status.json").read_text())["pending_uploads"] == 0
        _wait(lambda: agent.proc.poll() is not None, "the drained job to stop")
        agent.tick()
    finally:
        agent.stop_job(9)
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["job"]["state"] == "exited" and status["job"]["exit_code"] == -15
    assert status["job"]["drained_at"] == 1006.0


def test_a_drained_agent_commits_nothing_the_stopping_job_writes_later(tmp_path: Path) -> None:
    # The replacement may start once the drain's checkpoint is in (orchestrator/engine/facts.py): a checkpoint
    # the job writes while it shuts down must not move LATEST past what the replacement restored.
    clock, poller = Clock(), ScriptedPoller()
    agent = _agent(_config(tmp_path, store=tmp_path / "store", command=_long_job(tmp_path)), clock, poller)
    agent.start_job()
    try:
        poller.current = [{"cloud": "aws", "kind": "spot-interruption", "key": "aws:k1", "detail": {}}]
        agent.tick()
        _checkpoint(tmp_path / "ckpt", 7)
        clock.t += 1
        agent.tick()                                 # drained; step-7 committed
        assert agent.latest == "step-7" and agent.job["drained"] is True
        _checkpoint(tmp_path / "ckpt", 8)            # written on the way down (a SIGTERM handler's save)
        clock.t += 1
        agent.tick()
        status = json.loads((tmp_path / "status.json").read_text())
        assert agent.latest == "step-7" and [c["name"] for c in agent.checkpoints] == ["step-7"]
        assert (tmp_path / "store" / "LATEST").read_text() == "step-7\n"
        assert not (tmp_path / "store" / "step-8").exists()
        assert status["pending_uploads"] == 0 and status["job"]["drained"] is True
        assert parse_status((tmp_path / "status.json").read_bytes()).drained is True
    finally:
        agent.stop_job(9)


def test_pending_uploads_count_complete_checkpoints_not_yet_committed(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    cfg = _config(tmp_path, store=remote)
    cfg["checkpoint"]["store"] = {"kind": "rclone", "path": str(remote), "uri": "s3://b/p", "env": {}}
    cfg["rclone"] = str(tmp_path / "no-such-rclone")      # every upload fails
    agent = oa.Agent(cfg, clock=Clock(), sampler=oa.GpuSampler(3, _smi("")), poller=NoNotices())
    _checkpoint(tmp_path / "ckpt", 5)
    _checkpoint(tmp_path / "ckpt", 6, complete=False)
    agent.tick()
    assert json.loads((tmp_path / "status.json").read_text())["pending_uploads"] == 1
    assert parse_status((tmp_path / "status.json").read_bytes()).pending_uploads == 1


def test_no_drain_on_multi_node_or_when_opted_out(tmp_path: Path) -> None:
    for name, extra in (("multi", {"nodes": 2}), ("optout", {"drain_after_notice": False})):
        home = tmp_path / name
        home.mkdir()
        clock, poller = Clock(), ScriptedPoller()
        agent = _agent(_config(home, store=home / "store", command=_long_job(home), **extra), clock, poller)
        agent.start_job()
        try:
            poller.current = [{"cloud": "aws", "kind": "spot-interruption", "key": "aws:k1", "detail": {}}]
            agent.tick()
            _checkpoint(home / "ckpt", 7)
            (home / "store" / "step-7").mkdir(parents=True)
            (home / "store" / "step-7" / "COMPLETE.node-1").write_text("ok\n")  # node 1's part is in
            clock.t += 1
            agent.tick()
            assert agent.latest == "step-7", name    # committed after the notice, and yet:
            assert agent.job["state"] == "running" and not agent.job.get("drained"), name
        finally:
            agent.stop_job(9)


def test_a_pending_drain_shortens_the_pause_between_rounds(tmp_path: Path) -> None:
    # Between a notice and its checkpoint on disk the agent looks every DRAIN_POLL_S, not every round: the
    # commit (and so the replacement's start) follows the job's checkpoint that much sooner.
    clock, poller = Clock(), ScriptedPoller()
    agent = _agent(_config(tmp_path, store=tmp_path / "store", command=_long_job(tmp_path),
                           sample_interval_s=0.5, notice_interval_s=0.5), clock, poller)
    agent.start_job()
    try:
        agent.tick()
        assert agent.round_pause() == 0.5                        # running, no notice
        poller.current = [{"cloud": "aws", "kind": "spot-interruption", "key": "aws:k1", "detail": {}}]
        clock.t += 1
        agent.tick()
        assert agent.round_pause() == oa.DRAIN_POLL_S            # noticed, its checkpoint not on disk yet
        _checkpoint(tmp_path / "ckpt", 7)
        clock.t += 1
        agent.tick()                                             # drained and committed
        assert agent.job["drained"] is True and agent.round_pause() == 0.5
    finally:
        agent.stop_job(9)


class GatedStore:
    """A store whose upload waits until LATEST has been read: it passes only if that read runs beside it."""

    uri = "s3://b/p"

    def __init__(self) -> None:
        import threading

        self.read = threading.Event()
        self.latest: str | None = "step-3"
        self.calls: list[str] = []

    def upload_dir(self, local: str, name: str, marker: str) -> None:
        assert self.read.wait(60), "LATEST was not read while the upload ran"
        self.calls.append(f"upload {name}")

    def read_latest(self) -> str | None:
        self.read.set()
        self.calls.append("read LATEST")
        return self.latest

    def write_latest(self, name: str) -> None:
        self.calls.append(f"write LATEST {name}")
        self.latest = name


class FlakyLatestStore:
    """A store whose LATEST cannot be read or written while ``down`` names that operation (as rclone failing)."""

    uri = "s3://b/p"

    def __init__(self, latest: str | None) -> None:
        self.latest = latest
        self.down: set[str] = set()
        self.uploads: list[str] = []

    def upload_dir(self, local: str, name: str, marker: str) -> None:
        self.uploads.append(name)

    def read_latest(self) -> str | None:
        if "read" in self.down:
            raise OSError("rclone cat exited 1: connection reset by peer")
        return self.latest

    def write_latest(self, name: str) -> None:
        if "write" in self.down:
            raise OSError("rclone copyto exited 1: connection reset by peer")
        self.latest = name


@pytest.mark.parametrize("failing", ["read", "write"])
def test_a_latest_that_cannot_be_read_or_written_leaves_the_checkpoint_uncommitted(tmp_path: Path,
                                                                                   failing: str) -> None:
    """Before, a LATEST read that failed was taken for "no LATEST" (so LATEST could move backwards, past another
    life's step-9), and a failed LATEST write still counted the checkpoint committed: no retry, and a drain or
    the engine took LATEST for the last checkpoint while it stayed behind."""
    store = FlakyLatestStore("step-3")
    agent = _agent(_config(tmp_path, store=tmp_path / "unused"), store=store)
    _checkpoint(tmp_path / "ckpt", 5)
    store.down = {failing}
    agent.tick()
    assert store.latest == "step-3" and agent.checkpoints == [] and agent.failed_uploads == {"step-5": 1}
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert status.pending_uploads == 1 and any("latest step-5" in e for e in status.errors)
    store.down = set()
    agent.tick()                                      # asked again next round
    assert store.latest == "step-5" and [c["name"] for c in agent.checkpoints] == ["step-5"]
    assert agent.failed_uploads == {}
    store.latest, store.down = "step-9", {"read"}     # another life got further; this agent cannot see it
    _checkpoint(tmp_path / "ckpt", 7)
    agent.tick()
    assert store.latest == "step-9" and [c["name"] for c in agent.checkpoints] == ["step-5"]


@pytest.mark.parametrize(("rc", "out", "expected"), [(0, "step-4\n", "step-4"), (0, "", None), (3, "", None),
                                                     (4, "", None), (1, "", OSError)])
def test_rclone_store_tells_no_latest_from_a_latest_it_cannot_read(tmp_path: Path, rc: int, out: str,
                                                                   expected: Any) -> None:
    fake = tmp_path / "rclone"
    fake.write_text(f"#!/bin/sh\nprintf '{out}'\necho 'rclone: said no' >&2\nexit {rc}\n")
    fake.chmod(0o755)
    store = oa.Store({"kind": "rclone", "path": "orchs3:b/p", "env": {}}, rclone=str(fake))
    if expected is OSError:
        with pytest.raises(OSError, match="rclone cat exited 1: rclone: said no"):
            store.read_latest()
    else:
        assert store.read_latest() == expected


@pytest.mark.parametrize(("rc", "fails"), [(0, False), (3, False), (4, False), (1, True)])
def test_rclone_store_deletes_an_object_an_absent_one_is_no_error(tmp_path: Path, rc: int, fails: bool) -> None:
    fake = tmp_path / "rclone"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'args'}\necho 'rclone: said no' >&2\nexit {rc}\n")
    fake.chmod(0o755)
    store = oa.Store({"kind": "rclone", "path": "orchs3:b/p", "env": {}}, rclone=str(fake))
    if fails:
        with pytest.raises(OSError, match="rclone deletefile exited 1: rclone: said no"):
            store.delete_object("secrets.json")
    else:
        store.delete_object("secrets.json")
    assert (tmp_path / "args").read_text() == "deletefile orchs3:b/p/secrets.json\n"


def test_latest_is_read_while_the_checkpoint_uploads_and_only_once_per_round(tmp_path: Path) -> None:
    store = GatedStore()
    agent = _agent(_config(tmp_path, store=tmp_path / "unused"), store=store)
    for step in (5, 7):
        _checkpoint(tmp_path / "ckpt", step)
    agent.tick()
    assert store.calls == ["read LATEST", "upload step-5", "write LATEST step-5", "upload step-7",
                           "write LATEST step-7"]
    assert agent.latest == "step-7" and [c["name"] for c in agent.checkpoints] == ["step-5", "step-7"]
    store.latest, store.calls = "step-9", []                  # another life got further: never backwards
    store.read.clear()
    _checkpoint(tmp_path / "ckpt", 8)
    agent.tick()
    assert store.calls == ["read LATEST", "upload step-8"] and agent.latest == "step-7"


def test_an_agent_started_ahead_of_its_go_waits_then_starts_the_job(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # --await-go: the status says pending/awaits_go (and the pid file the go's waiter checks is there) until the
    # go file appears; then the job starts at once, the status says so, and the go and the pid file are removed.
    monkeypatch.chdir(tmp_path)
    go = tmp_path / "start.go"
    cfg = _config(tmp_path, command=["sh", "-c", "echo ran > ran.txt"])
    waiting: list[dict[str, Any]] = []

    def sleep(_s: float) -> None:
        if go.exists() or agent.job["state"] != "pending":
            time.sleep(0.01)                                    # the job's rounds: let it run
            return
        waiting.append(json.loads((tmp_path / "status.json").read_text()))
        assert (tmp_path / "start.go.wait").read_text().strip() == str(os.getpid())
        assert not (tmp_path / "job.log").exists()              # nothing started while it waits
        if len(waiting) == 3:
            go.write_text("")

    agent = oa.Agent(cfg, clock=Clock(), sampler=oa.GpuSampler(3, _smi("")), poller=NoNotices(), sleep=sleep)
    assert agent.run(str(go)) == 0
    assert [(s["job"]["state"], s["agent"]["awaits_go"]) for s in waiting] == [("pending", True)] * 3
    assert (tmp_path / "ran.txt").read_text() == "ran\n"
    assert not go.exists() and not (tmp_path / "start.go.wait").exists()
    status = parse_status((tmp_path / "status.json").read_bytes())
    assert status.job.state is JobState.EXITED and not status.awaits_go
