"""The rehearsal: start the job under the real agent, preempt it, kill it, relaunch it from LATEST.

Life 1 runs until ``preempt_at`` (default: its first step or checkpoint; 0: at once); its processes are
frozen while the notice is raised and the agent records it (so "at step N" means N), then thawed. The
machine is then killed hard (the agent and the job, SIGKILL) at ``kill_at``, or once a checkpoint taken
after the notice is committed, or when the job ends, or when the cloud's notice window runs out. Life 2, a
fresh directory against the same store, starts as the daemon would start a replacement: its startup script
restores LATEST. An uninterrupted reference life against its own store gives the final state to compare.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.manifest.schema import Manifest
from orchestrator.rehearse.local import LocalTransport, NoticeServer, alive, freeze, hard_kill, thaw
from orchestrator.rehearse.observe import (
    complete_checkpoints,
    progress,
    read_status,
    wait_for,
)
from orchestrator.rehearse.world import LifePaths, World
from orchestrator.runtime.bootstrap import bootstrap
from orchestrator.runtime.status import AgentStatus, JobState

Say = Callable[[str], None]
_ENDED = (JobState.EXITED, JobState.FAILED)


@dataclass(frozen=True, slots=True)
class RehearsalOptions:
    preempt_at: int | None = None       # None: at the first step/checkpoint seen; 0: as soon as the job runs
    kill_at: int | None = None          # None: once a checkpoint after the notice is committed
    procs: int = 1
    device: str = "CPU"
    notice_window_s: float = 120.0      # the cloud's warning time (AWS: 2 minutes) when nothing is committed
    timeout_s: float = 1800.0           # any single wait (job start, a life's run) gives up after this
    compare: bool = True
    keep: bool = False


@dataclass(frozen=True, slots=True)
class _Notice:
    step: int | None
    seen: bool


@dataclass(frozen=True, slots=True)
class _Kill:
    step: int | None
    reason: str
    written: int | None
    status: AgentStatus | None


class RehearsalError(RuntimeError):
    """The rehearsal itself could not run (the agent did not start, a wait timed out)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ended(st: AgentStatus | None) -> bool:
    return st is not None and st.job.state in _ENDED


class Rehearsal:
    """One rehearsal in ``root`` (a fresh temporary directory); ``run`` returns the report."""

    def __init__(self, manifest: Manifest, manifest_path: Path, opts: RehearsalOptions, say: Say, root: Path,
                 notice: NoticeServer) -> None:
        self.m, self.path, self.opts, self.say = manifest, manifest_path, opts, say
        self.root, self.notice = root, notice
        self.world = World(manifest, manifest_path.resolve().parent, root / "store", notice.url, opts.procs)
        self.pids: list[int] = []

    # -- lives -----------------------------------------------------------------------------------------
    def start(self, name: str, store: Path | None = None) -> LifePaths:
        life = LifePaths(self.root / name)
        life.root.mkdir(parents=True)
        world = self.world if store is None else replace(self.world, store=store)
        try:
            res = bootstrap(LocalTransport(life.root), world.render_input(life, _free_port()), world.secret_values(),
                            ssh_deadline_s=60, status_deadline_s=min(self.opts.timeout_s, 300))
        except Exception as exc:  # BootstrapError, RenderInputError: the rehearsal cannot go on
            raise RehearsalError(f"{name}: the agent did not start: {exc}") from exc
        self.pids.append(res.status.agent_pid)
        self.say(f"{name}: agent pid {res.status.agent_pid} started the job in {life.work}")
        return life

    def finish(self, life: LifePaths, what: str) -> AgentStatus:
        """Wait until the job ended and the agent exited (its last tick commits what the job wrote last)."""
        said = {"at": time.monotonic(), "step": None}

        def ended() -> AgentStatus | None:
            s = read_status(life)
            step = progress(life)
            # a progress line at most every 10 s (display only; the wait itself is on the status file)
            if step != said["step"] and time.monotonic() - float(said["at"] or 0) >= 10:
                self.say(f"{what}: at step {step}")
                said.update(at=time.monotonic(), step=step)
            return s if _ended(s) else None

        st = wait_for(ended, self.opts.timeout_s, f"{what} to end")
        wait_for(lambda: not alive(st.agent_pid), self.opts.timeout_s, f"{what}'s agent to exit")
        return read_status(life) or st

    def cleanup(self) -> None:
        for pid in self.pids:
            if alive(pid):
                hard_kill(pid)

    # -- phases ----------------------------------------------------------------------------------------
    def preempt(self, life: LifePaths) -> _Notice | None:
        """Raise the notice at ``preempt_at``; None when the job ended first."""
        target = self.opts.preempt_at

        def ready() -> str | None:
            st = read_status(life)
            if _ended(st):
                return "ended"
            if st is None or st.job.state is not JobState.RUNNING:
                return None
            p = progress(life)
            if target == 0 or (target is None and p is not None) or (p is not None and target is not None
                                                                      and p >= target):
                return "go"
            return None

        if wait_for(ready, self.opts.timeout_s, "the job to reach the notice point") == "ended":
            return None
        st = read_status(life)
        assert st is not None and st.job.pid is not None
        frozen = freeze(st.job.pid)
        try:
            step = progress(life)
            self.notice.raise_notice()
            self.say(f"step {step}: preemption notice raised (the job is held until the agent has seen it)")
            try:
                wait_for(lambda: (s := read_status(life)) is not None and bool(s.checkpoint_requests), 60,
                         "the agent to see the notice")
                seen = True
            except RuntimeError:
                seen = False
        finally:
            thaw(frozen)
        return _Notice(step, seen)

    def kill(self, life: LifePaths, notice: _Notice | None) -> _Kill:
        start = read_status(life)
        before = max((c.step for c in start.checkpoints), default=-1) if start else -1
        window_end = time.monotonic() + self.opts.notice_window_s

        def trigger() -> str | None:
            st, p = read_status(life), progress(life)
            if self.opts.kill_at is not None and p is not None and p >= self.opts.kill_at:
                return f"--kill-at {self.opts.kill_at}"
            if _ended(st) and st is not None and st.pending_uploads == 0:
                return "the job had stopped" + (" (drained by the agent)" if st.drained else "")
            if notice is not None and self.opts.kill_at is None:
                if st is not None and max((c.step for c in st.checkpoints), default=-1) > before:
                    return "right after the checkpoint was committed"
                if time.monotonic() > window_end:
                    return f"the {self.opts.notice_window_s:.0f}s notice window ran out"
            return None

        reason = wait_for(trigger, self.opts.timeout_s, "the kill point")
        st = read_status(life)
        if st is not None:
            hard_kill(st.agent_pid)
        step = progress(life)
        after = [s for s in complete_checkpoints(life.ckpt) if notice is None or s >= (notice.step or 0)]
        self.say(f"step {step}: machine killed ({reason})")
        return _Kill(step, reason, after[0] if after else None, st)

    def relaunch(self) -> tuple[LifePaths, AgentStatus]:
        self.notice.preempted.clear()   # the replacement machine is not being preempted
        life = self.start("life-2")
        return life, self.finish(life, "the relaunched job")

    def reference(self) -> Path:
        store = self.root / "reference-store"
        self.say("reference: the same job uninterrupted, for the final state")
        self.finish(self.start("reference", store), "the reference job")
        return store
