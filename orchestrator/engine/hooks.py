"""The engine's seams to the nodes, each a small protocol: read a node (Monitor), start its job
(Bootstrapper), render the script a machine boots with (StartupRenderer). What a node tells the engine
is typed (``AgentReport``, ``Notice``), never a formatted string.

The defaults here do nothing: no node is read (the providers' own states still count), nothing is
started over SSH (the startup script does the work), no startup script. ``orchestrator.daemon.assembly`` wires
the real ones (``orchestrator.runtime``): the SSH bootstrapper and monitor when orch has an SSH key, and
the manifest's rendered startup script otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from orchestrator.engine.notices import NoticeKind
from orchestrator.engine.ports import AttemptRecord, JobRecord
from providers.base import Instance

__all__ = ["AgentReport", "Bootstrapper", "Monitor", "NoBootstrap", "NoMonitor", "NoStartupScript", "Notice",
           "NoticeKind", "StartupRenderer", "StartupScriptError", "ask_checkpoint"]


@dataclass(frozen=True, slots=True)
class Notice:
    """A preemption notice the node's agent heard: which cloud said it, its kind, the agent's dedup key, when."""

    cloud: str
    kind: NoticeKind
    key: str
    seen_at: datetime

    def __post_init__(self) -> None:
        # The kind is decided on (ends_attempt): a value that is no member is refused here, not carried as text.
        if not isinstance(self.kind, NoticeKind):
            raise TypeError(f"Notice.kind must be a NoticeKind, not {self.kind!r}")

    def describe(self) -> str:
        return f"{self.cloud} {self.kind.value} (agent, {self.key})"


@dataclass(frozen=True, slots=True)
class AgentReport:
    """What the monitor learned from an instance's agent this tick."""

    gpu_util_pct: tuple[float, ...] = ()
    notice: Notice | None = None             # the newest preemption notice the agent heard
    #: Notices that asked the job to checkpoint now and end nothing (an AWS rebalance recommendation, a GCE
    #: maintenance event): the engine records each once as an event, the attempt goes on.
    advisories: tuple[Notice, ...] = ()
    checkpoints: tuple[tuple[str, int | None], ...] = ()   # committed (uri, step), oldest first
    exit_code: int | None = None             # the job process ended with this code
    pending_uploads: int = 0                 # checkpoints complete on the machine, not yet in the store
    #: The agent stopped the job after its notice checkpoint; from then on it commits only the checkpoints
    #: complete at that moment (``pending_uploads`` counts only those), whatever the stopping job writes.
    drained: bool = False
    #: The agent's own last heartbeat (its clock), where the channel carries one. The liveness step counts
    #: the node as heard when it moves on (a report without one counts as heard whenever it is read).
    heartbeat_at: datetime | None = None
    #: On a failed exit: the node's own words (the agent's errors and the last lines of the job's output), so the
    #: attempt's reason says what happened (a missing directory, a failed setup, a command not found).
    last_words: str = ""


class Monitor(Protocol):
    def read(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> AgentReport | None:
        """What the attempt's agent reports now; None when it cannot be read (the engine then relies on the
        provider's state). Called in the passive phase for running attempts and draining machines."""
        ...

    def listens(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        """Whether this machine has a channel its agent reports over (a store, SSH). Without one the engine
        sets no heartbeat deadline on it and times its boot by orch's own record, not by a report: silence
        there says nothing (orchestrator/engine/liveness.py). A monitor that does not say listens to every machine."""
        return True


class Bootstrapper(Protocol):
    def start(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        """Start the job on a running machine: True once started (idempotent: a second call finds it
        running), False while the machine cannot be reached yet (the next tick tries again). The attempt
        is BOOTSTRAPPING meanwhile; a rank > 0 of a gang carries node 0's ``master_addr``/``master_key``.

        A bootstrapper may also have ``ask_checkpoint(job, attempt, instance, reason) -> bool``: ask the node
        to checkpoint now, then stop (see ``ask_checkpoint`` below); one without it never asks."""
        ...


def ask_checkpoint(bootstrapper: object, job: JobRecord, attempt: AttemptRecord, instance: Instance,
                   reason: str) -> bool:
    """Ask the node to checkpoint now and stop after it (as an interrupting notice would), over the channel
    orch starts it by; True when asked. A bootstrapper without ``ask_checkpoint`` cannot ask (False)."""
    ask = getattr(bootstrapper, "ask_checkpoint", None)
    return bool(ask(job, attempt, instance, reason)) if ask is not None else False


class StartupScriptError(ValueError):
    """The job cannot be rendered into a startup script (the message says which field and why)."""


class StartupRenderer(Protocol):
    def render(self, job: JobRecord, attempt: AttemptRecord) -> str:
        """The script the machine of ``attempt`` boots with (its node rank, launch id, checkpoint to restore,
        and, when known, node 0's address): passed to the provider as user data. Raises StartupScriptError
        when the job cannot be rendered (the engine reports it and launches without a script)."""
        ...


class NoMonitor:
    """Reads no node. The engine then hears no agent, so it applies no heartbeat deadline (the boot deadline
    still ends a machine never started, and a cloud's UNREACHABLE still counts after its grace): see
    orchestrator/engine/liveness.py."""

    def read(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> AgentReport | None:
        return None

    def listens(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        return False


class NoBootstrap:
    """Starts nothing: the machine's startup script does the work, so a running machine runs the job."""

    def start(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        return True


class NoStartupScript:
    def render(self, job: JobRecord, attempt: AttemptRecord) -> str:
        return ""
