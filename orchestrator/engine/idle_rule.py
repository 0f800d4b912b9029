"""Idle detection by GPU utilization: a machine is idle only if EVERY GPU stayed under the threshold
for the WHOLE window (a short dip, or one busy GPU, keeps it), or if it runs no job at all."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum


class IdleAction(StrEnum):
    STOP = "stop"
    TERMINATE = "terminate"


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    min_gpu_util_pct: float = 5.0
    window: timedelta = timedelta(minutes=15)
    action: IdleAction = IdleAction.TERMINATE


@dataclass(frozen=True, slots=True)
class UtilSample:
    at: datetime
    gpu_util_pct: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class IdleVerdict:
    idle: bool
    reason: str


def idle_verdict(samples: Sequence[UtilSample], policy: IdlePolicy, now: datetime, *,
                 has_job: bool = True) -> IdleVerdict:
    """Decide from utilization samples (any order). Missing data is never read as idle."""
    if not has_job:
        return IdleVerdict(True, "no job on this instance")
    start = now - policy.window
    window = sorted((s for s in samples if s.at >= start - timedelta(seconds=1e-6)), key=lambda s: s.at)
    covering = [s for s in samples if s.at <= start]
    if not covering:
        return IdleVerdict(False, f"less than {policy.window} of utilization history")
    busiest = max((u for s in window for u in s.gpu_util_pct), default=None)
    if busiest is None:
        return IdleVerdict(False, "no samples inside the window")
    if busiest >= policy.min_gpu_util_pct:
        return IdleVerdict(False, f"a GPU reached {busiest:g}% in the last {policy.window}")
    return IdleVerdict(True, f"every GPU under {policy.min_gpu_util_pct:g}% for {policy.window} "
                             f"(max {busiest:g}%)")
