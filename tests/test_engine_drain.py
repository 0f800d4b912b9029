"""The notice window in the engine: the replacement boots at once but starts its job only once the noticed
machine has committed its notice checkpoint and stopped (or is unreachable, or the drain is over)."""

from __future__ import annotations

import pytest

from orchestrator.engine.hooks import AgentReport
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from tests.test_engine import live, notice, settle, spec, world  # noqa: F401

NOTICE = notice()


@pytest.fixture
def noticed(world):  # type: ignore[no-untyped-def]  # noqa: F811
    """A job running on its first machine, whose agent has just heard a notice (job still running)."""
    clock, store, aws, gcp, monitor, rec = world
    boot = rec.hooks.bootstrapper
    job = store.add_job(spec(), clock())
    settle(rec, clock)
    [old] = live(aws, gcp)
    monitor.reports[old.instance_id] = AgentReport(gpu_util_pct=(90.0,), notice=NOTICE,
                                                   checkpoints=(("s3://b/step-5", 5),))
    clock.advance(seconds=5)
    report = rec.tick()
    assert report.preempted == 1 and report.relaunched == 1
    [new] = [i for i in live(aws, gcp) if i.instance_id != old.instance_id]
    return clock, store, aws, gcp, monitor, rec, boot, job, old, new


def test_the_replacement_waits_for_the_noticed_machine_to_commit_and_stop(noticed) -> None:  # type: ignore[no-untyped-def]
    clock, store, _aws, _gcp, monitor, rec, boot, job, old, new = noticed
    for _ in range(3):
        clock.advance(seconds=10)
        rec.tick()
    assert [iid for iid, *_ in boot.started] == [old.instance_id]      # the replacement is up, job not started
    assert store.job(job.id).status is JobStatus.LAUNCHING
    # The old machine's agent stopped the job after its notice checkpoint; the upload is still going.
    monitor.reports[old.instance_id] = AgentReport(notice=NOTICE, exit_code=-15, pending_uploads=1,
                                                   checkpoints=(("s3://b/step-5", 5),))
    clock.advance(seconds=10)
    rec.tick()
    assert [iid for iid, *_ in boot.started] == [old.instance_id]
    # Committed: now the replacement starts, and restores it.
    monitor.reports[old.instance_id] = AgentReport(notice=NOTICE, exit_code=-15,
                                                   checkpoints=(("s3://b/step-5", 5), ("s3://b/step-9", 9)))
    clock.advance(seconds=10)
    rec.tick()
    assert [iid for iid, *_ in boot.started] == [old.instance_id, new.instance_id]
    assert store.last_checkpoint(job.id) == "s3://b/step-9"            # the store knows what B restores
    assert store.job(job.id).status is JobStatus.RUNNING


def test_a_drained_agent_holds_the_replacement_for_its_upload_not_for_the_jobs_exit(noticed) -> None:  # type: ignore[no-untyped-def]
    clock, store, _aws, _gcp, monitor, rec, boot, job, old, new = noticed
    # The agent stopped the job after its notice checkpoint (drained); the framework still shuts down (no exit
    # code yet) and the upload is still going: the replacement waits.
    monitor.reports[old.instance_id] = AgentReport(notice=NOTICE, drained=True, pending_uploads=1,
                                                   checkpoints=(("s3://b/step-5", 5),))
    clock.advance(seconds=10)
    rec.tick()
    assert new.instance_id not in [iid for iid, *_ in boot.started]
    # Committed: a drained agent commits nothing later, so the replacement starts though the job has not exited.
    monitor.reports[old.instance_id] = AgentReport(notice=NOTICE, drained=True,
                                                   checkpoints=(("s3://b/step-5", 5), ("s3://b/step-9", 9)))
    clock.advance(seconds=10)
    rec.tick()
    assert new.instance_id in [iid for iid, *_ in boot.started]
    assert store.last_checkpoint(job.id) == "s3://b/step-9"


def test_the_waiting_replacement_is_staged_then_started_once_the_commit_is_in(noticed) -> None:  # type: ignore[no-untyped-def]
    clock, _store, _aws, _gcp, monitor, rec, boot, _job, old, new = noticed
    staged: list[str] = []

    def stage(job, attempt, instance) -> bool:  # type: ignore[no-untyped-def]
        staged.append(instance.instance_id)
        if len(staged) == 1:
            raise OSError("a staging bug")      # reported; the tick goes on, the next tick stages again
        return True

    boot.stage = stage
    clock.advance(seconds=10)
    report = rec.tick()
    assert staged == [new.instance_id] and [e for e in report.errors if e.startswith("stage ")]
    clock.advance(seconds=10)
    rec.tick()
    assert staged == [new.instance_id] * 2
    assert new.instance_id not in [iid for iid, *_ in boot.started]     # staged, not started: A still uploads
    monitor.reports[old.instance_id] = AgentReport(notice=NOTICE, exit_code=-15, checkpoints=(("s3://b/step-9", 9),))
    clock.advance(seconds=10)
    rec.tick()
    assert new.instance_id in [iid for iid, *_ in boot.started] and len(staged) == 2


def test_the_replacement_starts_when_the_drain_is_over(noticed) -> None:  # type: ignore[no-untyped-def]
    clock, _store, _aws, _gcp, _monitor, rec, boot, _job, _old, new = noticed
    clock.advance(seconds=60)
    rec.tick()
    assert new.instance_id not in [iid for iid, *_ in boot.started]
    clock.advance(seconds=61)                                             # past the 2-minute drain
    rec.tick()
    assert new.instance_id in [iid for iid, *_ in boot.started]


def test_an_unreachable_noticed_machine_does_not_hold_the_replacement(noticed) -> None:  # type: ignore[no-untyped-def]
    clock, _store, _aws, _gcp, monitor, rec, boot, _job, old, new = noticed
    del monitor.reports[old.instance_id]                                  # the monitor reads nothing: None
    clock.advance(seconds=10)
    rec.tick()
    assert new.instance_id in [iid for iid, *_ in boot.started]


def test_a_job_stopped_after_its_notice_is_preempted_not_failed(world) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    clock, store, aws, gcp, monitor, rec = world
    job = store.add_job(spec(), clock())
    settle(rec, clock)
    [old] = live(aws, gcp)
    # The first read after the notice already shows the drained job's exit (a slow tick, a long window).
    monitor.reports[old.instance_id] = AgentReport(notice=NOTICE, exit_code=-15)
    clock.advance(seconds=30)
    report = rec.tick()
    assert report.preempted == 1 and report.relaunched == 1
    [first] = [a for a in store.attempts_for_job(job.id) if a.instance_id == old.instance_id]
    assert first.state is AttemptState.PREEMPTED and first.end_cause is EndCause.NOTICED
    assert store.job(job.id).status is not JobStatus.FAILED


def test_a_machine_up_at_its_launch_is_staged_in_the_launching_tick(world) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    # Own machines are up once launched: the launch is staged in the same tick (the bootstrapper's own thread
    # in the daemon), so the replacement's agent is ready before the start step runs; the start follows.
    clock, store, aws, gcp, monitor, rec = world
    boot = rec.hooks.bootstrapper
    staged: list[tuple[str, str]] = []

    def stage(job, attempt, instance) -> bool:  # type: ignore[no-untyped-def]
        staged.append((instance.instance_id, attempt.launch_id))
        return True

    boot.stage = stage
    job = store.add_job(spec(), clock())
    report = rec.tick()
    assert report.launched == 1 and not boot.started
    [inst] = live(aws, gcp)
    assert staged == [(inst.instance_id, inst.launch_id)]                # staged in the launch's own tick
    settle(rec, clock)
    assert [iid for iid, *_ in boot.started] == [inst.instance_id]
    assert store.job(job.id).status is JobStatus.RUNNING
    # The relaunch after a notice: the replacement is staged in the tick that launched it.
    monitor.reports[inst.instance_id] = AgentReport(notice=NOTICE, checkpoints=(("s3://b/step-5", 5),))
    clock.advance(seconds=5)
    assert rec.tick().relaunched == 1
    [new] = [i for i in live(aws, gcp) if i.instance_id != inst.instance_id]
    assert staged[-1] == (new.instance_id, new.launch_id) and len(staged) == 2
