"""The alerts orch sends, as typed values, and their two wire forms (Slack-compatible and generic JSON)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class AlertKind(StrEnum):
    PREEMPTED = "preempted"
    RELAUNCHED = "relaunched"
    IDLE_STOPPED = "idle-stopped"
    BOOT_FAILED = "boot-failed"              # a node that never reported within its boot timeout
    NODE_SILENT = "node-silent"              # a node whose agent went silent past the heartbeat timeout
    NODE_UNREACHABLE = "node-unreachable"    # a node its cloud listed unreachable past the grace
    RELAUNCH_CAP = "relaunch-cap"            # a job failed: its machine lost again after max_relaunches
    BUDGET_STOP = "budget-stop"              # a job stopped: its own budget_usd spent
    BUDGET_THRESHOLD = "budget-threshold"
    BUDGET_CAP_STOP = "budget-cap-stop"      # a budget at its monthly cap ended a job's machines (stop_at_cap)
    JOB_FINISHED = "job-finished"
    JOB_FAILED = "job-failed"


@dataclass(frozen=True, slots=True)
class Alert:
    kind: AlertKind
    job: str | None
    provider: str | None
    message: str
    time: datetime

    def to_json(self) -> dict[str, str | None]:
        """The generic webhook's body: ``{"kind", "job", "provider", "message", "time"}``."""
        return {"kind": self.kind.value, "job": self.job, "provider": self.provider, "message": self.message,
                "time": self.time.isoformat()}

    def slack(self) -> dict[str, str]:
        """Slack's incoming-webhook body (Mattermost, Discord's /slack and others read it too)."""
        where = " ".join(p for p in (self.job, f"on {self.provider}" if self.provider else None) if p)
        return {"text": f"orch {self.kind.value}" + (f" {where}" if where else "") + f": {self.message}"}
