"""``rehearse``: the whole scenario and its verdict (the phases are in runner.py)."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from orchestrator.manifest.schema import Manifest
from orchestrator.rehearse.local import NoticeServer
from orchestrator.rehearse.observe import RehearsalTimeout, log_tail, logged_steps, progress, store_latest
from orchestrator.rehearse.report import FinalState, RehearsalReport, Verdict
from orchestrator.rehearse.runner import Rehearsal, RehearsalError, RehearsalOptions, Say
from orchestrator.words import plural


def _digests(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def compare_final(store: Path, reference: Path) -> tuple[FinalState, str]:
    """The rule in report.COMPARE_RULE."""
    mine, theirs = store_latest(store), store_latest(reference)
    if mine is None or theirs is None:
        return FinalState.NOT_COMPARED, "no final checkpoint to compare"
    if mine != theirs:
        return FinalState.NOT_COMPARED, f"final checkpoints at different steps ({mine} vs {theirs} uninterrupted)"
    a, b = _digests(store / f"step-{mine}"), _digests(reference / f"step-{theirs}")
    differ = sorted(n for n in a.keys() | b.keys() if a.get(n) != b.get(n))
    if not differ:
        return FinalState.EQUAL, f"step-{mine} matches an uninterrupted run byte for byte ({plural(len(a), 'file')})"
    return FinalState.DIFFERENT, f"step-{mine} differs from an uninterrupted run in {', '.join(differ[:4])}"


def rehearse(manifest: Manifest, manifest_path: Path, opts: RehearsalOptions, say: Say) -> RehearsalReport:
    """Run the rehearsal in a temporary directory (kept with ``opts.keep``); never leaves a process behind."""
    label = str(manifest_path)
    if manifest.checkpoint is None:
        return RehearsalReport(manifest.name, label, Verdict.WOULD_LOSE_ALL,
                               "would lose all progress: the manifest has no checkpoint: block, so a preemption "
                               "restarts the job from the beginning")
    root = Path(tempfile.mkdtemp(prefix="orch-rehearse-"))
    try:
        with NoticeServer() as notice:
            r = Rehearsal(manifest, manifest_path, opts, say, root, notice)
            try:
                report = _scenario(r, label)
            except (RehearsalTimeout, RehearsalError) as exc:
                report = RehearsalReport(manifest.name, label, Verdict.FAILED, str(exc),
                                         tuple(r.world.notes(opts.device)))
            finally:
                r.cleanup()
    finally:
        if not opts.keep:
            shutil.rmtree(root, ignore_errors=True)
    if opts.keep:
        from dataclasses import replace

        report = replace(report, kept_dir=str(root))
    return report


def _scenario(r: Rehearsal, label: str) -> RehearsalReport:
    opts, m = r.opts, r.m
    notes = tuple(r.world.notes(opts.device))
    for n in notes:
        r.say(f"note: {n}")
    life = r.start("life-1")
    early_kill = opts.kill_at is not None and opts.preempt_at is not None and opts.kill_at <= opts.preempt_at
    notice = None if early_kill else r.preempt(life)
    base = {"job": m.name, "manifest": label, "notes": notes}
    if notice is None and not early_kill:
        st = r.finish(life, "the job")
        verdict = Verdict.FAILED if st.job.exit_code else Verdict.NOT_INTERRUPTED
        text = (f"the job failed (exit {st.job.exit_code}) before the notice" if st.job.exit_code else
                f"the job finished at step {progress(life)} before the notice point: raise --steps or lower "
                "--preempt-at")
        return RehearsalReport(verdict=verdict, detail=text, log_tail=log_tail(life.job_log), **base)
    kill = r.kill(life, notice)
    committed = store_latest(r.world.store)
    facts = {"notice_step": notice.step if notice else None, "notice_seen": bool(notice and notice.seen),
             "checkpoint_step": kill.written, "committed_step": committed, "killed_at_step": kill.step,
             "kill_reason": kill.reason}
    if kill.status is not None and kill.status.job.exit_code not in (None, 0) and not kill.status.drained:
        return RehearsalReport(verdict=Verdict.FAILED, detail=f"the job failed (exit {kill.status.job.exit_code})",
                               log_tail=log_tail(life.job_log), **base, **facts)
    if committed is None:
        lost = f" ({kill.step} steps)" if kill.step is not None else ""
        return RehearsalReport(verdict=Verdict.WOULD_LOSE_ALL, detail=f"would lose all progress{lost}: no "
                               "checkpoint was committed before the machine went away (does the script write "
                               f"step-N/COMPLETE under {m.checkpoint.path if m.checkpoint else '?'}?)",
                               **base, **facts)
    r.say(f"relaunching from LATEST step-{committed} on a fresh machine, as the daemon would")
    life2, st2 = r.relaunch()
    steps2 = logged_steps(life2)
    facts.update(resumed_from=committed, first_step_after=steps2[0] if steps2 else None, final_step=progress(life2))
    if st2.job.exit_code != 0:
        return RehearsalReport(verdict=Verdict.NOT_RESUMED, detail=f"the relaunched job failed (exit "
                               f"{st2.job.exit_code})", log_tail=log_tail(life2.job_log), **base, **facts)
    if steps2 and steps2[0] != committed + 1:
        return RehearsalReport(verdict=Verdict.NOT_RESUMED, detail=f"the relaunch started at step {steps2[0]} "
                               f"although LATEST was step-{committed}: the script does not resume from "
                               "the checkpoint it is given", **base, **facts)
    state, state_text = FinalState.NOT_COMPARED, "skipped (--no-compare)"
    if opts.compare:
        state, state_text = compare_final(r.world.store, r.reference())
    lost = (kill.step - committed) if kill.step is not None else None
    text = f"resumed from step {committed}" + (f", {plural(lost, 'step')} lost" if lost is not None else "")
    return RehearsalReport(verdict=Verdict.RESUMED, detail=text, final_state=state, final_state_detail=state_text,
                           **base, **facts)
