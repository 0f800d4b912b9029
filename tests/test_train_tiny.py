"""examples/train_tiny.py: interrupted by checkpoint-now + SIGKILL, resumed, it ends where an
uninterrupted run ends (bit for bit), losing no step before the checkpoint and repeating none after."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent import load_agent

# torch runs in the training processes; this one imports it only to compare final weights whose files differ
# (_assert_same_weights): imported here it would cost every pytest worker seconds at collection, whatever it runs.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch is not installed: the tiny training job cannot run")

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "train_tiny.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
STEPS = 10
DEADLINE_S = 60.0


def _agent_module() -> Any:
    return load_agent()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _argv(tmp: Path, *extra: str) -> list[str]:
    return [*TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
            str(_port()), str(SCRIPT), "--steps", str(STEPS), "--ckpt-every", "1000", "--ckpt-dir",
            str(tmp / "ckpt"), *extra]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _wait_for(cond: Callable[[], bool], what: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"training exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _steps(log: Path) -> list[int]:
    return [int(line.split()[1]) for line in log.read_text().splitlines()]


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    out = subprocess.run(argv, cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=DEADLINE_S)
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.mark.slow      # three torchrun jobs of two ranks each
def test_checkpoint_now_kill_and_resume_matches_uninterrupted_run(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    _run(_argv(base, "--out", str(base / "final.pt"), "--steps-log", str(base / "steps.log")), base)
    assert _steps(base / "steps.log") == list(range(1, STEPS + 1))

    # Interrupted run: the launcher ignores the signal (as the rendered startup script arranges), the
    # ranks handle it; it holds after step 4 until the request comes, so the checkpoint step is known.
    agent = _agent_module()
    run = tmp_path / "run"
    run.mkdir()
    log1 = run / "steps-1.log"
    cmd = " ".join(_argv(run, "--out", str(run / "final.pt"), "--steps-log", str(log1), "--hold-at-step", "4",
                          "--hang-after-hold"))
    proc = subprocess.Popen(["bash", "-c", f"trap '' USR1; exec {cmd}"], cwd=run, env=_env(),
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: log1.exists() and 4 in _steps(log1), "step 4", proc)
        # As the agent does: to the whole process tree (torchrun puts each rank in its own session).
        agent.signal_tree(proc.pid, signal.SIGUSR1)
        marker = run / "ckpt" / "step-4" / "COMPLETE"
        _wait_for(marker.exists, "checkpoint step-4", proc)
    finally:
        agent.signal_tree(proc.pid, signal.SIGKILL)  # the spot machine goes away
        proc.wait(timeout=30)
    assert not (run / "final.pt").exists()
    assert _steps(log1)[:4] == [1, 2, 3, 4]

    # Resume (path through the environment, as the rendered script's env mode does).
    log2 = run / "steps-2.log"
    env = _env() | {"ORCH_RESUME_PATH": str(run / "ckpt" / "step-4")}
    _run(_argv(run, "--out", str(run / "final.pt"), "--steps-log", str(log2)), run, env)
    assert _steps(log2) == list(range(5, STEPS + 1))  # nothing lost, nothing run twice after the checkpoint

    _assert_same_weights(base / "final.pt", run / "final.pt")


def _assert_same_weights(want_path: Path, got_path: Path) -> None:
    """Every tensor of the two state dicts equal. The same bytes load as the same tensors, so two equal
    torch.save archives holding tensors settle it without torch in this process (~3 s of CPU to import);
    anything else is loaded and compared tensor by tensor, as before (it passes if only the files' layout
    differs, fails on a file torch cannot load, and names the tensor that differs)."""
    if want_path.read_bytes() == got_path.read_bytes() and zipfile.is_zipfile(want_path):
        with zipfile.ZipFile(want_path) as archive:
            names = archive.namelist()
        if any(n.endswith("/data.pkl") for n in names) and any("/data/" in n for n in names):
            return
    import torch

    want = torch.load(want_path, weights_only=True)
    got = torch.load(got_path, weights_only=True)
    assert want.keys() == got.keys()
    for name in want:
        assert torch.equal(want[name], got[name]), name


def test_resume_refuses_a_checkpoint_without_marker(tmp_path: Path) -> None:
    (tmp_path / "ckpt" / "step-3").mkdir(parents=True)
    out = subprocess.run(_argv(tmp_path, "--resume-from", str(tmp_path / "ckpt" / "step-3"), "--out",
                               str(tmp_path / "f.pt"), "--steps-log", str(tmp_path / "s.log")),
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=DEADLINE_S)
    assert out.returncode != 0
    assert "no COMPLETE marker" in out.stderr
    assert not (tmp_path / "f.pt").exists()


def test_checkpoint_now_by_file_is_taken_at_the_agreed_step(tmp_path: Path) -> None:
    request = tmp_path / "ckpt" / "CHECKPOINT_NOW"
    log = tmp_path / "steps.log"
    proc = subprocess.Popen(_argv(tmp_path, "--out", str(tmp_path / "final.pt"), "--steps-log", str(log),
                                  "--hold-at-step", "3", "--checkpoint-file", str(request)),
                            cwd=tmp_path, env=_env(), start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: log.exists() and 3 in _steps(log), "step 3", proc)
        request.parent.mkdir(parents=True, exist_ok=True)
        request.write_text("aws spot-interruption\n")  # what the agent does
        assert proc.wait(timeout=DEADLINE_S) == 0
    finally:
        if proc.poll() is None:
            _agent_module().signal_tree(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-3"]  # consumed, and only step 3
    assert sorted(p.name for p in (tmp_path / "ckpt" / "step-3").iterdir()) == [
        "COMPLETE", "meta.json", "model.pt", "optim.pt", "rng-rank0.pt", "rng-rank1.pt"]
    assert _steps(log) == list(range(1, STEPS + 1))
