"""Why a machine or a job failed, typed: the cause, the node's (or the cloud's) own words, and the fix.

A cause is decided once, where the failure is seen, from typed facts: a provider's typed error
(providers/errors.py: capacity, quota, auth, and the SSH adapter's codes for a missing workdir and a failed
GPU check), or the agent's exit facts (the startup script's exit codes for a failed ``setup:`` line, a
command not found; a GPU driver that does not answer, as the node's own words say it). It travels as the
data of the failure's event (``to_data``), so ``orch status``, ``orch logs`` and the console read it back
typed (``Failure.from_data``), never from a message's text.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.engine.events import EventKind
from orchestrator.engine.states import JobStatus
from providers.errors import (
    AuthError,
    GpuCheckFailedError,
    InsufficientCapacityError,
    MissingWorkdirError,
    PriceTooLowError,
    ProviderError,
    QuotaExceededError,
)

#: The startup script's exit when a line of the manifest's ``setup:`` failed (orchestrator/runtime/render.py).
SETUP_FAILED_EXIT = 78

#: What a node says when its GPU driver cannot serve the job (nvidia-smi, the CUDA runtime, PyTorch).
_DRIVER_WORDS = ("nvidia-smi has failed", "couldn't communicate with the nvidia driver",
                 "cuda driver version is insufficient", "no cuda-capable device is detected",
                 "found no nvidia driver", "nvidia driver on your system is too old", "cuda_error_no_device",
                 "cudaerrornodevice", "cudagetdevicecount", "driver/library version mismatch")


#: The events whose data may carry a typed failure (``Failure.to_data``).
FAILURE_EVENTS: tuple[EventKind, ...] = (EventKind.NODE_FAILED, EventKind.LAUNCH_FAILED, EventKind.LAUNCH_REFUSED)
#: Job statuses for which the latest failure is still news (a running job's old refusals are not).
FAILURE_STATUSES = frozenset({JobStatus.FAILED, JobStatus.PENDING, JobStatus.RECOVERING})


class FailureCause(StrEnum):
    WORKDIR = "workdir"      # the host's work directory is missing
    SETUP = "setup"          # a line of the manifest's setup: failed
    COMMAND = "command"      # the job's command failed (or was not found)
    DRIVER = "driver"        # the machine's GPU driver/CUDA does not serve the job
    CAPACITY = "capacity"    # the cloud has no machine of this offer now
    QUOTA = "quota"          # the account's quota forbids the launch
    AUTH = "auth"            # the provider's credentials are missing or refused

    @property
    def fix(self) -> str:
        return _FIXES[self]


_FIXES: dict[FailureCause, str] = {
    FailureCause.WORKDIR: "create the directory on the host, or fix workdir in providers.ssh.hosts",
    FailureCause.SETUP: "a setup: line of the manifest failed: run it by hand on this image, or fix it "
                        "(orch logs JOB shows its output)",
    FailureCause.COMMAND: "the job's command failed: read its output (orch logs JOB), fix the command or "
                          "the code, then orch apply again",
    FailureCause.DRIVER: "the GPU driver does not serve the job: use an image whose CUDA matches the "
                         "machine's driver, or fix the driver on the host (verify_command)",
    FailureCause.CAPACITY: "no machine of this offer now: orch tries the next offer; allow more GPUs, "
                           "regions, markets or providers to give it more",
    FailureCause.QUOTA: "raise the account's GPU/vCPU quota with the provider, or allow another "
                        "provider or region",
    FailureCause.AUTH: "check the provider's credentials in the config or the environment (orch providers)",
}


@dataclass(frozen=True, slots=True)
class Failure:
    cause: FailureCause
    words: str                  # the node's (or the cloud's) own words, as they said it

    @property
    def first_line(self) -> str:
        """The words' first non-empty line (the agent joins lines with " | ")."""
        for line in self.words.replace(" | ", "\n").splitlines():
            if line.strip():
                return line.strip()
        return ""

    def headline(self) -> str:
        """``cause: first line of the words`` (the cause alone when there are none)."""
        return f"{self.cause.value}: {self.first_line}" if self.first_line else self.cause.value

    def to_data(self) -> dict[str, Any]:
        return {"cause": self.cause.value, "words": self.words, "fix": self.cause.fix}

    @staticmethod
    def from_data(data: object) -> Failure | None:
        """The failure an event's data carries (None when it carries none, or a cause this orch does not know)."""
        if not isinstance(data, dict):
            return None
        try:
            cause = FailureCause(str(data.get("cause")))
        except ValueError:
            return None
        return Failure(cause, str(data.get("words") or ""))


def of_provider_error(exc: ProviderError) -> Failure | None:
    """The typed cause of a provider's error, with its words (None: a cause this taxonomy does not name)."""
    words = str(exc)
    if isinstance(exc, MissingWorkdirError):
        return Failure(FailureCause.WORKDIR, words)
    if isinstance(exc, GpuCheckFailedError):    # the SSH host's GPU check (verify_command) failed
        return Failure(FailureCause.DRIVER, words)
    if isinstance(exc, InsufficientCapacityError | PriceTooLowError):
        return Failure(FailureCause.CAPACITY, words)
    if isinstance(exc, QuotaExceededError):
        return Failure(FailureCause.QUOTA, words)
    if isinstance(exc, AuthError):
        return Failure(FailureCause.AUTH, words)
    return None


def of_exit(exit_code: int, words: str) -> Failure:
    """The typed cause of a job that exited ``exit_code`` (non-zero), from the agent's exit facts."""
    if exit_code == SETUP_FAILED_EXIT:
        return Failure(FailureCause.SETUP, words)
    low = words.lower()
    if any(w in low for w in _DRIVER_WORDS):
        return Failure(FailureCause.DRIVER, words)
    return Failure(FailureCause.COMMAND, words)
