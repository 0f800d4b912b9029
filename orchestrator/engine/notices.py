"""What a cloud's notice to a node says, typed: the agent reports a kind string (docs/runtime.md, "Status file");
the runtime parses it into a ``NoticeKind`` (orchestrator/runtime/status.py) and the engine decides on the member
(orchestrator/engine/hooks.py ``Notice``), never on the text."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["NoticeKind"]


class NoticeKind(StrEnum):
    """What a cloud's notice says, as the agent reports it (its ``kind`` strings).

    Only a real interruption ends an attempt: AWS spot ``instance-action``, GCE ``preempted``, Azure
    ``Preempt``/``Terminate``. A rebalance recommendation (AWS: a risk signal that may never be followed by an
    interruption) and a GCE ``maintenance-event`` (a host maintenance is coming; 60 min warning on GPU VMs)
    ask for a checkpoint now and are shown, nothing more."""

    SPOT_INTERRUPTION = "spot-interruption"        # AWS spot/instance-action
    PREEMPTED = "preempted"                        # GCE instance/preempted TRUE
    PREEMPT = "preempt"                            # Azure Scheduled Event Preempt
    TERMINATE = "terminate"                        # Azure Scheduled Event Terminate
    REBALANCE = "rebalance-recommendation"         # AWS events/recommendations/rebalance
    MAINTENANCE = "maintenance-event"              # GCE instance/maintenance-event other than NONE
    ORCH_STOP = "orch-stop"                        # orch's checkpoint-now.json: checkpoint, then stop (a budget)
    UNKNOWN = "unknown"                            # a kind this orch does not know (a newer agent): ends it

    @classmethod
    def parse(cls, raw: str) -> NoticeKind:
        try:
            return cls(raw)
        except ValueError:
            return cls.UNKNOWN

    @property
    def ends_attempt(self) -> bool:
        return self not in (NoticeKind.REBALANCE, NoticeKind.MAINTENANCE)
