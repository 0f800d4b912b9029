"""Preemption recovery end to end: the engine drives a real DDP job over real SSH, the job is preempted
on machine A (with a spot notice, and without), orch relaunches it on machine B, which restores the
latest checkpoint from S3 (moto, through rclone) and finishes with the weights of an uninterrupted run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.ports import JobRecord
from orchestrator.engine.states import AttemptState, JobStatus
from tests.e2e.conftest import (
    NOTICE_WINDOW_S,
    SCRIPT,
    SECRET_VALUE,
    STEPS,
    WORK,
    Bucket,
    NoticeTimeline,
    World,
    add_job,
    agents_on,
    code_repo,
    files_containing,
    git,
    job_manifest,
    kill_machine,
    move_repo_on,
    poll_until,
    steps_logged,
)
from tests.support.sshd import Sshd

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]


def _job_state(machine: Sshd) -> str | None:
    """The job's state in the machine's agent status (None while unreadable: written atomically, but maybe absent)."""
    try:
        return str(json.loads((machine.workdir / WORK / "status.json").read_text())["job"]["state"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _start_on_a(world: World, job: JobRecord, repo: Path) -> None:
    """Tick until the job runs on A (cheaper), then until the engine has a committed checkpoint from it; then
    the user's repository moves on (a commit whose script fails): the relaunch must not pick it up."""
    world.tick_until(lambda: world.running_on(job, "host-a"), "the job to run on host-a", deadline_s=180.0)
    world.tick_until(lambda: world.store.last_checkpoint(job.id), "a committed checkpoint reported from A",
                     deadline_s=180.0)
    # The GPU utilization the stand-in nvidia-smi shows on A reached the engine over SSH.
    [attempt_a] = [a for a in world.attempts(job) if a.instance_id == "host-a"]
    assert (87.0, 93.0) in [r.gpu_util_pct for r in world.monitor.reports["host-a"]]
    assert (87.0, 93.0) in [s.gpu_util_pct for s in world.rec.utilization(attempt_a.id)]
    assert any("--query-gpu" in c for c in world.a.nvidia_smi_calls)
    # A runs the script from the code pack of the applied commit: not preinstalled, unpacked into its work dir.
    pin = world.store.job(job.id).manifest.code.pin
    assert pin is not None and pin.commit == git(repo, "rev-parse", "HEAD") and pin.files == 3
    assert (world.a.workdir / WORK / ".orch-code").read_text().strip() == pin.sha256
    assert (world.a.workdir / WORK / "train_tiny.py").read_bytes() == SCRIPT.read_bytes()
    assert move_repo_on(repo) != pin.commit


def _finish_on_b(world: World, job: JobRecord, bucket: Bucket, restored_step: int, lost_from: list[int],
                 reference: Mapping[str, Any]) -> None:
    """Tick until B has finished; check resume point, steps, weights. ``lost_from``: A's steps."""
    world.tick_until(lambda: world.store.job(job.id).status is JobStatus.SUCCEEDED, "the job to succeed on B",
                     deadline_s=240.0)
    final = world.attempts(job)[-1]
    assert (final.instance_id, final.state, final.reason) == ("host-b", AttemptState.SUCCEEDED, "job exited 0")
    # B restored LATEST and resumed right after it: no step lost beyond it, none run twice after it.
    # B unpacked the applied commit (VERSION 1), not the repository's newer one (whose script would fail).
    assert (world.b.workdir / WORK / "VERSION").read_text() == "1\n"
    b_steps = steps_logged(world.b)
    assert b_steps == list(range(restored_step + 1, STEPS + 1)), b_steps[:5]
    assert lost_from[: restored_step] == list(range(1, restored_step + 1))
    job_log = (world.b.workdir / WORK / "job.log").read_text()
    assert f"resuming from ckpt/step-{restored_step}" in job_log
    assert bucket.latest() == f"step-{STEPS}"
    import torch

    weights = torch.load(world.b.workdir / WORK / "final.pt", weights_only=True)
    assert weights.keys() == reference.keys()
    assert all(torch.equal(weights[k], reference[k]) for k in reference)
    # B's own GPU numbers reached the engine too.
    assert (61.0, 64.0) in [r.gpu_util_pct for r in world.monitor.reports["host-b"]]
    # Both hosts are released: A by the drain sweep or the preemption, B when the job ended.
    assert world.provider.list_instances("e2e") == []
    # The secret reached rclone (uploads worked) by name only: its value is in no file on either machine.
    assert files_containing(world.a, SECRET_VALUE) == files_containing(world.b, SECRET_VALUE) == []


def test_spot_notice_checkpoints_now_and_resumes_on_b(world: World, bucket: Bucket, tmp_path: Path,
                                                      reference_weights: Mapping[str, Any]) -> None:
    # The job holds after step 8 until asked to checkpoint now, and again after step 9: A is mid-run when the
    # notice arrives and still running (held after step 9) when its agent drains it; B, resuming at step 9, is
    # held there, running, until the test has checked B's agent and asks it to checkpoint now.
    manifest = job_manifest(bucket, ["--hold-at-step", "8", "--hold-at-step", "9"],
                            resume="{arg: --resume-from}", notify="{file: ckpt/CHECKPOINT_NOW}")
    repo = code_repo(tmp_path)
    job = add_job(world.store, manifest, repo)
    _start_on_a(world, job, repo)

    marks = NoticeTimeline(world, job)
    world.metadata.raise_aws_spot()
    noticed = time.monotonic()
    # orch ticks at the daemon's cadence (a tick when its wake watch says one is due, else every 15 s): it reads
    # the notice, launches B at once, and starts the job on B once A's agent has committed the notice
    # checkpoint. The engine's clock stands still meanwhile (``world.clock``): the drain window cannot run out
    # because this machine is loaded, so B waits for A's agent, as it does on a real cloud within the window.
    world.tick_until(lambda: marks.seen() and world.running_on(job, "host-b"), "the replacement to run on host-b",
                     deadline_s=180.0, daemon=True)
    running_b = time.monotonic() - noticed
    # B no longer waits for A's job to shut down (only for its commit): A's drained job exits on its own within
    # the window (its agent stopped it at the drain); the test lets it, so the kill below meets an ended job.
    poll_until(lambda: _job_state(world.a) == "exited", "A's drained job to exit", 60.0)
    # Then the window ends and, like a real reclaim, the "cloud" kills A whatever it is doing.
    world.clock.advance(NOTICE_WINDOW_S)
    kill_machine(world.a)
    a_steps = steps_logged(world.a)
    poll_until(lambda: steps_logged(world.b), "B's first training step", 180.0)
    stepping_b = time.monotonic() - noticed
    job_log_b = (world.b.workdir / WORK / "job.log").read_text()
    restored = int(job_log_b.split("resuming from ckpt/step-", 1)[1].split()[0])
    # The notice checkpoint: A, held after step 9, checkpointed nothing later.
    assert restored == 8 and a_steps[-1] <= 9, (restored, a_steps[-1:])
    # A stopped after its notice checkpoint: nothing it trained later was committed, LATEST is B's start.
    status_a = json.loads((world.a.workdir / WORK / "status.json").read_text())
    assert status_a["job"]["drained"] is True and status_a["job"]["state"] == "exited"
    assert status_a["latest"] == f"step-{restored}"
    # Bootstrapping again (a restarted daemon, a repeated tick) finds the agent and starts no second one. B's job
    # is held after its first step meanwhile: its agent is still there to be found.
    assert steps_logged(world.b) == [restored + 1]
    b_running = world.running_on(job, "host-b")
    inst_b = world.provider.get("host-b")
    assert b_running is not None and inst_b is not None
    status_b = world.b.workdir / WORK / "status.json"
    agent_b = json.loads(status_b.read_text())["agent"]
    assert world.rec.hooks.bootstrapper.start(world.store.job(job.id), b_running, inst_b) is True
    assert json.loads(status_b.read_text())["agent"]["started_at"] == agent_b["started_at"]
    assert agents_on(world.b) == 1
    assert getattr(world.pool.get(inst_b), "connect_count", None) == 1  # one kept-alive connection to B
    [a_attempt] = [a for a in world.attempts(job) if a.instance_id == "host-a"]
    assert a_attempt.state is AttemptState.PREEMPTED
    assert a_attempt.reason and a_attempt.reason.startswith("notice: aws spot-interruption")
    # The store learnt A's notice checkpoint while B waited for it.
    assert world.store.last_checkpoint(job.id) == f"{bucket.uri}/step-{restored}"
    assert world.store.job(job.id).relaunch_count == 1
    # B's hold ends as a checkpoint-now request does (an extra checkpoint; it leaves the weights as they are).
    request = world.b.workdir / WORK / "ckpt" / "CHECKPOINT_NOW"
    request.parent.mkdir(parents=True, exist_ok=True)
    request.write_text("test: go on\n")
    lost = a_steps[-1] - restored
    print(f"\n[e2e notice] notice -> running on B: {running_b:.2f}s (engine ticking throughout; its drain "
          f"window ends after; first step on B: {stepping_b:.1f}s after the notice); restored step-{restored} (the "
          f"notice checkpoint or later); A stopped at step {a_steps[-1]}; steps lost: {lost}")
    print(f"[e2e notice timeline] {marks.line()}")
    _finish_on_b(world, job, bucket, restored, a_steps, reference_weights)


def test_spot_host_dies_without_notice_and_resumes_from_the_periodic_checkpoint(
        world: World, bucket: Bucket, tmp_path: Path, reference_weights: Mapping[str, Any]) -> None:
    # Vast/RunPod style: no notice; the periodic checkpoints (every 5 steps) are the only defence. A's job hangs
    # after step 12 (mid-run, its checkpoints 5 and 10 written) until the "cloud" kills it; B's, resuming, goes on.
    manifest = job_manifest(bucket, ["--hang-at-step", "12"], resume="{env: ORCH_RESUME_FROM}",
                            notify="{signal: SIGUSR1}")
    repo = code_repo(tmp_path)
    job = add_job(world.store, manifest, repo)
    _start_on_a(world, job, repo)

    # A dies: its processes are killed, the machine stops answering, the provider reports it reclaimed.
    kill_machine(world.a)
    died = time.monotonic()
    world.a.stop()
    world.provider.reclaim("host-a")
    restored = bucket.latest_step()
    a_steps = steps_logged(world.a)
    assert restored is not None and restored % 5 == 0 and a_steps[-1] <= 12, (restored, a_steps[-1:])
    assert world.metadata.spot_action is None  # no notice was ever served

    world.tick_until(lambda: world.running_on(job, "host-b"), "the replacement to run on host-b")
    running_b = time.monotonic() - died
    [a_attempt] = [a for a in world.attempts(job) if a.instance_id == "host-a"]
    assert (a_attempt.state, a_attempt.reason) == (AttemptState.PREEMPTED, "spot host reclaimed (test)")
    print(f"\n[e2e no notice] death -> running on B: {running_b:.1f}s; restored periodic step-{restored}; "
          f"A reached step {a_steps[-1]}; steps lost: {a_steps[-1] - restored}")
    _finish_on_b(world, job, bucket, restored, a_steps, reference_weights)
