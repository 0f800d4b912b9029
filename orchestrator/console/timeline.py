"""A job's history as lanes on a time axis: one lane per machine (generation, node), its boot and run spans,
and marks for checkpoints, preemptions and relaunches. Pure: built from ``JobDetail``, drawn by ``charts``.

A relaunch is the first node-0 attempt that got a machine, created at or after an attempt of the job ended by
preemption or ended failed after it had run (a lost machine): what the engine started to recover. Launches
the cloud refused (no machine was ever named) get no lane and are no relaunch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from orchestrator.engine.states import AttemptState
from orchestrator.store.console_values import AttemptView, JobDetail


class SpanKind(StrEnum):
    BOOT = "boot"     # launch asked, job not started yet
    RUN = "run"


class MarkKind(StrEnum):
    CHECKPOINT = "checkpoint"
    PREEMPTION = "preemption"
    RELAUNCH = "relaunch"


@dataclass(frozen=True, slots=True)
class Span:
    kind: SpanKind
    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True)
class Mark:
    kind: MarkKind
    at: datetime
    label: str


@dataclass(frozen=True, slots=True)
class Lane:
    label: str
    state: AttemptState
    spans: tuple[Span, ...]
    marks: tuple[Mark, ...]


@dataclass(frozen=True, slots=True)
class Timeline:
    start: datetime
    end: datetime
    lanes: tuple[Lane, ...]

    @property
    def marks(self) -> tuple[Mark, ...]:
        return tuple(m for lane in self.lanes for m in lane.marks)


def _recovers(a: AttemptView) -> bool:
    return a.ended_at is not None and (a.state is AttemptState.PREEMPTED
                                       or (a.state is AttemptState.FAILED and a.started_at is not None))


def _had_machine(a: AttemptView) -> bool:
    return a.instance_id is not None or a.state.is_live


def relaunches(attempts: Sequence[AttemptView]) -> dict[int, int]:
    """Attempt id -> relaunch number (1, 2, ...) for each attempt that is a relaunch (module docstring)."""
    ordered = sorted((a for a in attempts if _had_machine(a)), key=lambda a: (a.created_at, a.id))
    found: dict[int, int] = {}
    for ended in sorted((a for a in attempts if _recovers(a)), key=lambda a: (a.ended_at, a.id)):
        assert ended.ended_at is not None
        nxt = next((a for a in ordered if a.node_rank == 0 and a.id != ended.id and a.created_at >= ended.ended_at),
                   None)
        if nxt is not None and nxt.id not in found:
            found[nxt.id] = len(found) + 1
    return found


def build_timeline(detail: JobDetail, now: datetime) -> Timeline:
    shown = [a for a in detail.attempts if _had_machine(a)]
    numbers = relaunches(detail.attempts)
    lanes = []
    for a in shown:
        end = a.ended_at or now
        spans = [Span(SpanKind.BOOT, a.created_at, a.started_at or end)]
        if a.started_at is not None:
            spans.append(Span(SpanKind.RUN, a.started_at, end))
        marks = [Mark(MarkKind.CHECKPOINT, c.committed_at,
                      f"checkpoint {'step ' + str(c.step) if c.step is not None else c.uri}")
                 for c in detail.checkpoints if c.attempt_id == a.id]
        if a.state is AttemptState.PREEMPTED and a.ended_at is not None:
            marks.append(Mark(MarkKind.PREEMPTION, a.ended_at, f"preempted ({a.reason})" if a.reason else "preempted"))
        if a.id in numbers:
            marks.append(Mark(MarkKind.RELAUNCH, a.created_at, f"relaunch {numbers[a.id]}"
                              + (f" from {a.checkpoint_restored}" if a.checkpoint_restored else "")))
        label = f"gen {a.generation} · node {a.node_rank} · {a.provider} {a.market.value if a.market else ''}"
        lanes.append(Lane(label, a.state, tuple(spans), tuple(sorted(marks, key=lambda m: m.at))))
    starts = [a.created_at for a in shown] or [detail.created_at]
    ends = [s.end for lane in lanes for s in lane.spans] + [m.at for lane in lanes for m in lane.marks]
    start = min(starts)
    end = max([*ends, start]) if detail.status.is_final else max([*ends, now])
    return Timeline(start, end, tuple(lanes))
