"""bootstrap over a Transport: files land, the agent starts detached, runs the job, reports status.

A local Transport (bash in a temp "home") stands in for SSH; the SSH transport has the same shape.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.bootstrap import BootstrapError, bootstrap, wait_for_ssh
from orchestrator.runtime.from_manifest import LaunchFacts, render_input_for
from orchestrator.runtime.render_input import RenderInput
from orchestrator.runtime.status import JobState, parse_status


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str


class LocalTransport:
    def __init__(self, home: Path, path: str = f"{Path(sys.executable).parent}:/usr/bin:/bin") -> None:
        self.home = home
        self.path = path
        self.commands: list[str] = []

    def _path(self, remote: str) -> Path:
        return Path(remote) if remote.startswith("/") else self.home / remote

    def exec(self, cmd: str, timeout: float, *, stdin: bytes | None = None) -> Result:
        self.commands.append(cmd)
        out = subprocess.run(["bash", "-c", cmd], cwd=self.home, capture_output=True, timeout=timeout, input=stdin,
                             env={"PATH": self.path, "HOME": str(self.home)})
        return Result(out.returncode, out.stdout.decode(), out.stderr.decode())

    def put(self, data_or_path: bytes | str, remote_path: str, mode: int) -> None:
        data = data_or_path if isinstance(data_or_path, bytes) else Path(data_or_path).read_bytes()
        path = self._path(remote_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)   # as the real transports: mode at creation
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)

    def get(self, remote_path: str) -> bytes:
        return self._path(remote_path).read_bytes()


def _render_input(command: str, checkpoint: dict[str, object] | None = None) -> RenderInput:
    """A command job needing the secret TOK, as orch renders it; fast agent loops (a machine's setting)."""
    doc = {"apiVersion": "orch/v1", "kind": "Job", "name": "boot", "resources": {"gpu": "L4", "count": 1},
           "run": {"launcher": "command", "command": command}, "secrets": ["TOK"]}
    if checkpoint is not None:
        doc["checkpoint"] = checkpoint
    return render_input_for(Manifest.model_validate(doc), LaunchFacts(sample_interval_s=0.2, notice_interval_s=0.2))


def test_bootstrap_starts_agent_and_job_detached(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    ri = _render_input('echo "tok=$TOK" > seen.txt', {"path": str(tmp_path / "ckpt"), "store": "s3://unused/boot",
                                                      "resume": {"env": "ORCH_RESUME_PATH"}})
    assert ri.checkpoint is not None
    # The checkpoint store is a directory here (the renderer's file:// store; manifests offer cloud stores).
    store = f"file://{tmp_path / 'store'}"
    ri = dataclasses.replace(ri, checkpoint=dataclasses.replace(ri.checkpoint, store_uri=store))
    transport = LocalTransport(home)
    result = bootstrap(transport, ri, {"TOK": "v@lue with 'quotes'"},
                       ssh_deadline_s=5, status_deadline_s=30, sleep=lambda s: time.sleep(0.05))
    work = home / ".orch" / "jobs" / "boot"
    assert result.work_dir == ".orch/jobs/boot"
    assert stat.S_IMODE((work / "startup.sh").stat().st_mode) == 0o755
    assert "v@lue" not in (work / "startup.sh").read_text() and "v@lue" not in (work / "agent.json").read_text()

    deadline = time.monotonic() + 30
    while parse_status(transport.get(result.status_path)).job.state is not JobState.EXITED:
        assert time.monotonic() < deadline, "job did not finish"
        time.sleep(0.05)
    status = parse_status(transport.get(result.status_path))
    assert status.job.exit_code == 0
    assert (work / "seen.txt").read_text() == "tok=v@lue with 'quotes'\n"
    assert not (work / "secrets.env").exists()  # loaded into the agent's memory, then deleted
    assert any("setsid nohup python3 orch_agent.pyz --config agent.json" in c for c in transport.commands)


def _left_status(home: Path, pid: int) -> bytes:
    """The status an earlier agent of the launch left in the work dir (it is dead; a new one restores from it)."""
    work = home / ".orch" / "jobs" / "boot"
    work.mkdir(parents=True)
    doc = {"version": 1, "job_name": "boot", "agent": {"pid": pid, "started_at": 1.0, "heartbeat": 2.0},
           "job": {"state": "running", "pid": pid + 1}, "gpu": {"available": False, "samples": [], "summary": {
               "samples": 0, "gpus": 0, "window_s": 0.0, "mean_util": None, "max_util": None,
               "last_mean_util": None, "max_mem_used_mib": None}}}
    (work / "status.json").write_text(json.dumps(doc))
    parse_status((work / "status.json").read_bytes())          # a whole status: only its writer is wrong
    return (work / "status.json").read_bytes()


def test_a_status_left_by_an_earlier_agent_is_not_taken_for_the_new_ones(tmp_path: Path) -> None:
    """The start's wait answers with a status the started agent wrote, never the one already there. The agent
    here never starts (python3 is a stub that exits), so nothing but the old status is ever there: the outcome
    is decided by what was written, and the short deadline only says when to stop waiting."""
    home, stub = tmp_path / "home", tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text("#!/bin/sh\nexit 1\n")
    (stub / "python3").chmod(0o755)
    left = _left_status(home, 999999)
    transport = LocalTransport(home, path=f"{stub}:/usr/bin:/bin")
    with pytest.raises(BootstrapError, match="wrote no status"):
        bootstrap(transport, _render_input("true"), {"TOK": "x"}, ssh_deadline_s=5, status_deadline_s=0.2)
    assert (home / ".orch" / "jobs" / "boot" / "status.json").read_bytes() == left


def test_the_start_answers_with_the_new_agents_own_status(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _left_status(home, 999999)
    transport = LocalTransport(home)
    result = bootstrap(transport, _render_input("true"), {"TOK": "x"}, ssh_deadline_s=5, status_deadline_s=60)
    assert result.status.agent_pid != 999999 and result.status.agent_started_at > 1.0
    status = parse_status(transport.get(result.status_path))
    with contextlib.suppress(ProcessLookupError):
        os.killpg(status.agent_pid, signal.SIGKILL)                 # its job is done; the agent need not linger


def test_missing_secret_value_fails_before_anything_starts(tmp_path: Path) -> None:
    transport = LocalTransport(tmp_path)
    with pytest.raises(BootstrapError, match="TOK"):
        bootstrap(transport, _render_input("true"), {}, ssh_deadline_s=1)
    assert not any("setsid" in c for c in transport.commands)


def test_wait_for_ssh_gives_up_at_the_deadline() -> None:
    class Refusing:
        def exec(self, cmd: str, timeout: float) -> Result:
            raise ConnectionRefusedError("refused")

    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(BootstrapError, match="did not answer"):
        wait_for_ssh(Refusing(), 10, clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    assert now[0] >= 10


def test_staging_puts_every_file_in_one_exec_with_its_mode(tmp_path: Path) -> None:
    from orchestrator.runtime.bootstrap import stage

    transport = LocalTransport(tmp_path)
    work = tmp_path / stage(transport, _render_input("true"), {"TOK": "s3cr3t"})
    assert len(transport.commands) == 1 and "tar -x" in transport.commands[0]
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in work.iterdir()}
    assert modes == {"orch_agent.pyz": 0o755, "startup.sh": 0o755, "agent.json": 0o644, "secrets.env": 0o600}
    assert (work / "secrets.env").read_text() == "export TOK=s3cr3t\n"
