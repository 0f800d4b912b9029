"""What a rehearsal found, as a value: printed as lines, or as JSON with ``--json``."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    RESUMED = "resumed"                          # relaunched from LATEST and continued after it
    WOULD_LOSE_ALL = "would-lose-all-progress"   # nothing was committed before the kill
    NOT_RESUMED = "not-resumed"                  # LATEST existed, the relaunch did not continue from it
    NOT_INTERRUPTED = "not-interrupted"          # the job ended before the notice/kill could reach it
    FAILED = "failed"                            # the job failed on its own


class FinalState(StrEnum):
    EQUAL = "equal"
    DIFFERENT = "different"
    NOT_COMPARED = "not-compared"


#: The columns of the report's lines (the CLI's width: a terminal's default).
WIDTH = 80

#: How "equal to an uninterrupted run" is decided (also in docs/cli.md).
COMPARE_RULE = ("the final committed checkpoint of the interrupted run and of an uninterrupted reference run "
                "(same manifest, same machine) are at the same step and every file in them has the same bytes "
                "(SHA-256); a script that is not deterministic (unseeded RNG, GPU atomics, time in its state) "
                "shows as different even when its resume is right")


@dataclass(frozen=True, slots=True)
class RehearsalReport:
    job: str
    manifest: str
    verdict: Verdict
    detail: str
    notes: tuple[str, ...] = ()
    notice_step: int | None = None
    notice_seen: bool = False
    checkpoint_step: int | None = None
    committed_step: int | None = None
    killed_at_step: int | None = None
    kill_reason: str = ""
    resumed_from: int | None = None
    first_step_after: int | None = None
    final_step: int | None = None
    final_state: FinalState = FinalState.NOT_COMPARED
    final_state_detail: str = ""
    kept_dir: str | None = None
    log_tail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def resumed(self) -> bool:
        return self.verdict is Verdict.RESUMED

    @property
    def exit_code(self) -> int:
        return 0 if self.resumed else 1

    @property
    def steps_lost(self) -> int | None:
        if self.killed_at_step is None:
            return None
        return self.killed_at_step - (self.committed_step or 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job, "manifest": self.manifest, "verdict": self.verdict.value, "resumed": self.resumed,
            "detail": self.detail, "notes": list(self.notes), "notice_step": self.notice_step,
            "notice_seen": self.notice_seen, "checkpoint_step": self.checkpoint_step,
            "committed_step": self.committed_step, "killed_at_step": self.killed_at_step,
            "kill_reason": self.kill_reason or None, "resumed_from": self.resumed_from,
            "first_step_after": self.first_step_after, "final_step": self.final_step,
            "steps_lost": self.steps_lost, "final_state": self.final_state.value,
            "final_state_detail": self.final_state_detail or None, "compare_rule": COMPARE_RULE,
            "kept_dir": self.kept_dir, "job_log_tail": self.log_tail or None,
        }

    def lines(self) -> list[str]:
        """The report for a person, within WIDTH columns (wrapped at spaces: a long path stays whole)."""
        import textwrap

        def wrap(text: str, first: str, rest: str) -> list[str]:
            return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest,
                                 break_long_words=False, break_on_hyphens=False)

        out = wrap(f"rehearse {self.job} ({self.manifest})", "", "  ")
        for n in self.notes:
            out += wrap(f"note: {n}", "  ", "        ")

        def row(label: str, text: str) -> None:
            out.extend(wrap(text, f"  {label:<13}", " " * 15))

        if self.notice_step is not None:
            row("notice", f"at step {self.notice_step} (GCP-style preemption on 127.0.0.1); " + (
                "the agent asked the job to checkpoint" if self.notice_seen else "the agent did NOT react"))
        if self.checkpoint_step is not None or self.committed_step is not None:
            written = f"step-{self.checkpoint_step} written" if self.checkpoint_step is not None else \
                "no checkpoint written after the notice"
            committed = f"LATEST step-{self.committed_step}" if self.committed_step is not None else "nothing committed"
            row("checkpoint", f"{written}; {committed}")
        if self.killed_at_step is not None:
            row("hard kill", f"at step {self.killed_at_step} ({self.kill_reason})")
        if self.resumed_from is not None:
            after = f"first step after it {self.first_step_after}" if self.first_step_after is not None else \
                "no step log to confirm"
            final = f", finished at step {self.final_step}" if self.final_step is not None else ""
            row("relaunch", f"from LATEST step-{self.resumed_from}: {after}{final}")
        if self.steps_lost is not None:
            row("steps lost", str(self.steps_lost))
        if self.final_state is not FinalState.NOT_COMPARED or self.final_state_detail:
            row("final state", f"{self.final_state.value}: {self.final_state_detail}")
        if self.log_tail:
            out.append("  job.log (last lines):")
            out += [f"    {line}" for line in self.log_tail.splitlines()]
        if self.kept_dir:
            out += wrap(f"files kept in {self.kept_dir}", "  ", "    ")
        out += wrap(f"{self.verdict.value.upper()}: {self.detail}", "", "  ")
        return out
