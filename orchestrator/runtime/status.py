"""The agent's status file (docs/runtime.md, "Status file"), parsed into frozen values.

The orchestrator reads the file over SSH and calls ``parse_status``; a file it cannot understand
raises StatusFormatError rather than yielding half a status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# The engine owns the kinds (it decides on them; runtime is above it): parsed here, re-exported for the node side.
from orchestrator.engine.notices import NoticeKind

__all__ = [
    "STATUS_VERSION",
    "AgentStatus",
    "CheckpointCommit",
    "CheckpointRequest",
    "GpuReading",
    "GpuSample",
    "GpuSummary",
    "JobState",
    "JobStatus",
    "Notice",
    "StatusFormatError",
    "parse_status",
]

STATUS_VERSION = 1


class StatusFormatError(ValueError):
    """The status document is not one this orchestrator understands."""


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    EXITED = "exited"
    FAILED = "failed"  # could not be started


@dataclass(frozen=True)
class GpuReading:
    index: int
    util: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    power_w: float | None


@dataclass(frozen=True)
class GpuSample:
    time: float
    gpus: tuple[GpuReading, ...]


@dataclass(frozen=True)
class GpuSummary:
    samples: int
    gpus: int
    window_s: float
    mean_util: float | None
    max_util: float | None
    last_mean_util: float | None
    max_mem_used_mib: float | None


@dataclass(frozen=True)
class Notice:
    cloud: str
    kind: NoticeKind
    key: str
    seen_at: float
    detail_json: str  # the cloud's own document, verbatim (JSON text, so the value stays hashable)


@dataclass(frozen=True)
class CheckpointRequest:
    time: float
    via: str
    reason: str


@dataclass(frozen=True)
class CheckpointCommit:
    name: str
    step: int
    uri: str
    committed_at: float


@dataclass(frozen=True)
class JobStatus:
    state: JobState
    pid: int | None
    exit_code: int | None
    started_at: float | None
    ended_at: float | None


@dataclass(frozen=True)
class AgentStatus:
    job_name: str
    node_rank: int
    agent_pid: int
    agent_started_at: float
    heartbeat: float
    job: JobStatus
    gpu_available: bool
    gpu_error: str | None
    gpu_samples: tuple[GpuSample, ...]
    gpu_summary: GpuSummary
    notices: tuple[Notice, ...]
    checkpoint_requests: tuple[CheckpointRequest, ...]
    checkpoints: tuple[CheckpointCommit, ...]
    latest: str | None
    errors: tuple[str, ...]
    #: Checkpoints complete on the node's disk and not yet committed (uploaded) by its agent.
    pending_uploads: int = 0
    #: The agent stopped the job after a notice, once a checkpoint taken since was complete on disk.
    drained: bool = False
    #: The launch whose agent wrote it ("" from an agent started without ORCH_LAUNCH_ID): a reader of one
    #: launch never takes another launch's status on the same machine for its own.
    launch_id: str = ""
    #: The agent was started ahead of its go (``--await-go``) and waits for it: its job has not started.
    awaits_go: bool = False

    @property
    def preempting(self) -> bool:
        """A notice that ends the attempt was heard (advisories -- rebalance, maintenance -- do not count)."""
        return any(n.kind.ends_attempt for n in self.notices)

    @property
    def advisories(self) -> tuple[Notice, ...]:
        """Notices that asked for a checkpoint and are shown, nothing more."""
        return tuple(n for n in self.notices if not n.kind.ends_attempt)

    @property
    def latest_commit(self) -> CheckpointCommit | None:
        return max(self.checkpoints, key=lambda c: c.step, default=None)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def parse_status(data: bytes | str) -> AgentStatus:
    """Parse the agent's status JSON. Raises StatusFormatError on bad JSON, version or shape."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise StatusFormatError(f"status is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != STATUS_VERSION:
        raise StatusFormatError(f"unsupported status version {doc.get('version') if isinstance(doc, dict) else '?'}")
    try:
        agent, job, gpu = doc["agent"], doc["job"], doc["gpu"]
        s = gpu["summary"]
        return AgentStatus(
            job_name=str(doc.get("job_name") or ""),
            node_rank=int(doc.get("node_rank", 0)),
            agent_pid=int(agent["pid"]),
            agent_started_at=float(agent["started_at"]),
            heartbeat=float(agent["heartbeat"]),
            job=JobStatus(state=JobState(job["state"]), pid=_opt_int(job.get("pid")),
                          exit_code=_opt_int(job.get("exit_code")), started_at=_opt_float(job.get("started_at")),
                          ended_at=_opt_float(job.get("ended_at"))),
            gpu_available=bool(gpu["available"]),
            gpu_error=gpu.get("error"),
            gpu_samples=tuple(
                GpuSample(time=float(x["time"]), gpus=tuple(
                    GpuReading(index=int(g["index"]), util=_opt_float(g["util"]),
                               mem_used_mib=_opt_float(g["mem_used_mib"]),
                               mem_total_mib=_opt_float(g["mem_total_mib"]), power_w=_opt_float(g["power_w"]))
                    for g in x["gpus"]))
                for x in gpu["samples"]),
            gpu_summary=GpuSummary(samples=int(s["samples"]), gpus=int(s["gpus"]), window_s=float(s["window_s"]),
                                   mean_util=_opt_float(s["mean_util"]), max_util=_opt_float(s["max_util"]),
                                   last_mean_util=_opt_float(s["last_mean_util"]),
                                   max_mem_used_mib=_opt_float(s["max_mem_used_mib"])),
            notices=tuple(Notice(cloud=str(n["cloud"]), kind=NoticeKind.parse(str(n["kind"])), key=str(n["key"]),
                                 seen_at=float(n["seen_at"]),
                                 detail_json=json.dumps(n.get("detail"), sort_keys=True))
                          for n in doc.get("notices", [])),
            checkpoint_requests=tuple(CheckpointRequest(time=float(r["time"]), via=str(r["via"]),
                                                        reason=str(r["reason"]))
                                      for r in doc.get("checkpoint_requests", [])),
            checkpoints=tuple(CheckpointCommit(name=str(c["name"]), step=int(c["step"]), uri=str(c["uri"]),
                                               committed_at=float(c["committed_at"]))
                              for c in doc.get("checkpoints", [])),
            latest=doc.get("latest"),
            errors=tuple(f"{e.get('where')}: {e.get('error')}" for e in doc.get("errors", [])),
            pending_uploads=int(doc.get("pending_uploads", 0)),
            drained=bool(job.get("drained", False)),
            launch_id=str(doc.get("launch_id") or ""),
            awaits_go=bool(agent.get("awaits_go", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StatusFormatError(f"status has an unexpected shape: {exc!r}") from None
