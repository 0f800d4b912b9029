"""``orch rehearse``: the job on this machine under the real agent, preempted, killed, relaunched.

The quick tests drive a small pure-Python trainer (below) through every verdict; the slow one rehearses
examples/torchrun-ddp.yaml (the tiny torch DDP job) end to end. Waits are on the agent's status file and the
job's steps log (orchestrator/rehearse/observe.py), with generous deadlines.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.manifest import load_manifests
from orchestrator.rehearse.world import LifePaths, World

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent reads /proc")

# A deterministic trainer: state is a hash chain over the steps; checkpoints step-N/{state.json,COMPLETE};
# checkpoints every --every steps and when $ORCH_CHECKPOINT_NOW_FILE appears; resumes from --resume-from.
TRAINER = r'''
import argparse, hashlib, json, os, pathlib, time
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--every", type=int, default=25)
p.add_argument("--never-checkpoint", action="store_true")
p.add_argument("--ignore-resume", action="store_true")
p.add_argument("--resume-from", default="")
a = p.parse_args()
ckpt = pathlib.Path(os.environ["ORCH_CHECKPOINT_DIR"])
now = os.environ.get("ORCH_CHECKPOINT_NOW_FILE", "")
state, start = "seed", 0
if a.resume_from and not a.ignore_resume:
    saved = json.loads((pathlib.Path(a.resume_from) / "state.json").read_text())
    state, start = saved["state"], saved["step"]
for step in range(start + 1, a.steps + 1):
    state = hashlib.sha256(f"{state}:{step}".encode()).hexdigest()
    with open(os.environ["ORCH_STEPS_LOG"], "a") as log:
        log.write(f"step {step}\n")
    asked = bool(now) and os.path.exists(now)
    if asked:
        os.unlink(now)
    if not a.never_checkpoint and (asked or step % a.every == 0):
        d = ckpt / f"step-{step}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "state.json").write_text(json.dumps({"step": step, "state": state}))
        (d / "COMPLETE").write_text(f"{step}\n")
    time.sleep(0.02)   # pacing: a step of real training takes time
'''


def _manifest(tmp_path: Path, *args: str) -> Path:
    (tmp_path / "trainer.py").write_text(TRAINER)
    path = tmp_path / "job.yaml"
    words = " ".join(args)
    path.write_text(
        "apiVersion: orch/v1\nkind: Job\nname: rehearsed\nresources: {gpu: L4, count: 1}\n"
        f"run: {{launcher: command, command: 'python3 trainer.py {words}'}}\n"
        "checkpoint: {path: /ckpt, store: s3://bucket/rehearsed, notify: {file: /ckpt/NOW}}\n"
        "secrets: [REHEARSE_TEST_TOKEN]\n")
    return path


def orch(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("REHEARSE_TEST_TOKEN", None)
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)


def test_world_moves_the_job_onto_this_machine(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "--steps", "10")
    m = load_manifests([path])[0].manifest
    world = World(m, tmp_path, tmp_path / "store", "http://127.0.0.1:1", 2)
    life = LifePaths(tmp_path / "life-1")
    ri = world.render_input(life, 29501)
    assert ri.nodes == 1 and ri.checkpoint is not None
    assert ri.checkpoint.store_uri == f"file://{tmp_path / 'store'}"             # s3:// replaced
    assert ri.checkpoint.local_dir == str(life.ckpt)                             # /ckpt moved
    assert ri.checkpoint.request_file == str(life.ckpt / "NOW")
    assert ri.command == f"python3 {tmp_path / 'trainer.py'} --steps 10"        # the file next to the manifest
    assert dict(ri.env)["ORCH_STEPS_LOG"] == str(life.steps_log)
    assert ri.agent.gcp_metadata_url == "http://127.0.0.1:1" and ri.agent.cloud.value == "gcp"
    assert any("replaced by the local file://" in n and "s3://bucket/rehearsed" in n for n in world.notes("CPU"))
    assert any("REHEARSE_TEST_TOKEN" in n for n in world.notes("CPU"))


def test_resuming_job_is_reported_resumed_with_its_numbers(tmp_path: Path) -> None:
    out = orch("rehearse", str(_manifest(tmp_path, "--steps", "60")), "--preempt-at", "10", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    # the job is held at the first step >= 10 the rehearsal sees (a step or two past it on a busy machine)
    n = report["notice_step"]
    assert report["verdict"] == "resumed" and 10 <= n < 60 and report["notice_seen"]
    # the notice made the trainer checkpoint at the step it was in or the next; the relaunch resumed from there
    assert report["checkpoint_step"] in (n, n + 1) and report["resumed_from"] >= report["checkpoint_step"]
    assert report["first_step_after"] == report["resumed_from"] + 1 and report["final_step"] == 60
    assert report["steps_lost"] == report["killed_at_step"] - report["resumed_from"] >= 0
    assert report["final_state"] == "equal"
    assert any("s3://bucket/rehearsed" in n for n in report["notes"])
    # progress lines while it ran
    for needle in ("preemption notice raised", "machine killed", "relaunching from LATEST"):
        assert needle in out.stderr
    # within 80 columns: the notes name a long temporary path (a word longer than a line stays whole)
    flat = " ".join(out.stderr.split())
    assert "rehearse: note: checkpoint store s3://bucket/rehearsed replaced by the local file://" in flat
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in out.stderr.splitlines()), out.stderr


def test_script_that_never_checkpoints_would_lose_all_progress(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "--steps", "100000", "--never-checkpoint")
    out = orch("rehearse", str(path), "--preempt-at", "5", "--kill-at", "20")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "WOULD-LOSE-ALL-PROGRESS: would lose all progress (" in out.stdout
    assert "hard kill    at step 2" in out.stdout   # 20 or a step or two past it
    # within 80 columns, but a word longer than that (the manifest's temporary path) stays whole
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in out.stdout.splitlines()), out.stdout
    assert "note: checkpoint store s3://bucket/rehearsed replaced" in out.stdout


def test_script_that_ignores_its_checkpoint_is_not_resumed(tmp_path: Path) -> None:
    out = orch("rehearse", str(_manifest(tmp_path, "--steps", "40", "--ignore-resume")), "--preempt-at", "8",
               "--no-compare", "--json")
    assert out.returncode == 1, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["verdict"] == "not-resumed" and report["first_step_after"] == 1
    assert "does not resume" in report["detail"]


def test_bad_input_exits_2(tmp_path: Path) -> None:
    out = orch("rehearse", str(_manifest(tmp_path)), "--kill-at", "0")
    assert out.returncode == 2 and "--kill-at must be 1 or more" in out.stderr
    out = orch("rehearse", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    out = orch("rehearse", str(empty))
    said = f"error: {empty} holds no job (apiVersion: orch/v1, kind: Job, ...): nothing to rehearse\n"
    assert out.returncode == 2 and out.stderr == said


@pytest.mark.slow
def test_rehearse_the_torchrun_ddp_example_resumes() -> None:
    if importlib.util.find_spec("torch") is None:  # not imported here: ~3 s of CPU this process does not use
        pytest.skip("the tiny DDP job needs torch")
    out = orch("rehearse", str(ROOT / "examples" / "torchrun-ddp.yaml"), "--json", timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["verdict"] == "resumed" and report["notice_seen"]
    assert report["first_step_after"] == report["resumed_from"] + 1 and report["final_step"] == 200
    assert report["final_state"] == "equal", report["final_state_detail"]
