"""The kinds of the store events the engine writes that something reads back: the alerts
(orchestrator/alerts/mapping.py), ``orch status``, the console. A str enum, so a kind is written and compared
as its text; kinds only shown to people (``no-offer``, ``waiting``...) stay plain strings where written.
tests/test_alerts_events.py checks that every kind an alert listens for is written by some step."""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    LAUNCHED = "launched"
    PREEMPTED = "preempted"
    RECOVERING = "recovering"
    GAVE_UP = "gave-up"                   # the recovery policy gave up (budget, deadline, its own cap)
    RELAUNCH_CAP = "relaunch-cap"         # lost its machine again after max_relaunches relaunches: failed
    BOOT_TIMEOUT = "boot-timeout"         # liveness: no report within the boot timeout (ended)
    NODE_SILENT = "node-silent"           # liveness: its agent silent past the heartbeat timeout (ended)
    NODE_UNREACHABLE = "node-unreachable"  # liveness: the cloud lists it unreachable past the grace (ended)
    IDLE_STOP_REQUESTED = "idle-stop-requested"   # idle: written before the cloud's stop call
    IDLE_SHUTDOWN = "idle-shutdown"
    BUDGET_THRESHOLD = "budget-threshold"
    BUDGET_REFUSED = "budget-refused"
    BUDGET_CAP_STOP = "budget-cap-stop"
    BUDGET_STOP = "budget-stop"           # a job's own budget_usd reached while it ran: stopped
    BUDGET_OVERRUN = "budget-overrun"     # a budget's burn over its $/h ceiling (orchestrator.budget_watch)
    BUDGET_OVERRUN_ENDED = "budget-overrun-ended"
    JOB_STATUS = "job.status"
    NODE_FAILED = "node-failed"           # a job's process exited non-zero: data carries its typed cause (failure.py)
