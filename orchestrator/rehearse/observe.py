"""What a rehearsal can see of a life: the agent's status file, the job's steps log, checkpoints on disk and
in the store. Waits are on these facts (a condition polled with a generous deadline), never fixed sleeps."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from orchestrator.rehearse.world import LifePaths
from orchestrator.runtime.status import AgentStatus, StatusFormatError, parse_status

T = TypeVar("T")
_STEP_LINE = re.compile(r"^\s*step[\s:=]+(\d+)", re.IGNORECASE)
_STEP_DIR = re.compile(r"^step-(\d+)$")
POLL_S = 0.1


class RehearsalTimeout(RuntimeError):
    """A wait ran past its deadline; the message says what was awaited."""


def wait_for(cond: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """Poll ``cond`` until it returns something other than None/False; RehearsalTimeout after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = cond()
        if found is not None and found is not False:
            return found
        if time.monotonic() > deadline:
            raise RehearsalTimeout(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(POLL_S)


def read_status(life: LifePaths) -> AgentStatus | None:
    try:
        return parse_status(life.status.read_bytes())
    except (OSError, StatusFormatError):
        return None


def logged_steps(life: LifePaths) -> list[int]:
    """Steps the job wrote to ``ORCH_STEPS_LOG`` (lines starting ``step N``), in order."""
    try:
        text = life.steps_log.read_text(errors="replace")
    except OSError:
        return []
    return [int(m.group(1)) for line in text.splitlines() if (m := _STEP_LINE.match(line))]


def complete_checkpoints(directory: Path, marker: str = "COMPLETE") -> list[int]:
    """Steps of ``step-N`` directories holding the marker (the agent's rule for "complete")."""
    try:
        names = [p.name for p in directory.iterdir() if (p / marker).is_file()]
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _STEP_DIR.match(n)))


def progress(life: LifePaths) -> int | None:
    """The furthest step this life is known to have done: from its steps log, else its checkpoints."""
    steps = logged_steps(life)
    if steps:
        return max(steps)
    ckpts = complete_checkpoints(life.ckpt)
    return max(ckpts) if ckpts else None


def store_latest(store: Path) -> int | None:
    """The step the store's LATEST names, if any."""
    try:
        m = _STEP_DIR.match((store / "LATEST").read_text().strip())
    except OSError:
        return None
    return int(m.group(1)) if m else None


def log_tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
