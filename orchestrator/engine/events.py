"""Every kind of store event orch writes, one member each. The engine, the store, the CLI's use cases and the
budget watch write them; the alerts (orchestrator/daemon/alert_events.py), ``orch status``/``orch events`` and the
console read them back. A str enum: a kind is stored and compared as its text.

tests/test_alerts_events.py checks that every event write names a member (no kind spelled as a string) and
that every kind an alert listens for is written by some step; ``repo`` refuses a kind that is not a member."""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    # The engine's steps.
    LAUNCHED = "launched"
    LAUNCH_REFUSED = "launch-refused"     # the cloud refused (capacity, quota): the next offer is tried
    LAUNCH_FAILED = "launch-failed"
    STARTUP_SCRIPT = "startup-script"     # no startup script could be rendered for the offer: not launched
    NO_OFFER = "no-offer"
    ADOPTED = "adopted"                   # a machine found for a launch id written before a crash
    STARTED = "started"
    NODE_STARTED = "node-started"
    PREEMPTED = "preempted"
    INSTANCE_LOST = "instance-lost"
    NOTICE_END = "notice-end"
    RECOVERING = "recovering"
    WAITING = "waiting"
    GAVE_UP = "gave-up"                   # the recovery policy gave up (budget, deadline, its own cap)
    NO_MACHINE = "no-machine"
    DEADLINE_MOVE = "deadline-move"
    RELAUNCH_CAP = "relaunch-cap"         # lost its machine again after max_relaunches relaunches: failed
    GANG_ABORTED = "gang-aborted"
    BOOT_TIMEOUT = "boot-timeout"         # liveness: no report within the boot timeout (ended)
    NODE_SILENT = "node-silent"           # liveness: its agent silent past the heartbeat timeout (ended)
    NODE_UNREACHABLE = "node-unreachable"  # liveness: the cloud lists it unreachable past the grace (ended)
    IDLE_STOP_REQUESTED = "idle-stop-requested"   # idle: written before the cloud's stop call
    IDLE_SHUTDOWN = "idle-shutdown"
    STOPPED_OUTSIDE = "stopped-outside"   # a machine stopped with no stop of orch's: the node is lost
    RELAUNCH_NOW = "relaunch-now"
    RELAUNCH_DROPPED = "relaunch-dropped"
    ORPHAN_TERMINATED = "orphan-terminated"
    LEFTOVER_DELETED = "leftover-deleted"
    # Budgets (the engine's gate, orchestrator.store.budget_watch).
    BUDGET_THRESHOLD = "budget-threshold"
    BUDGET_REFUSED = "budget-refused"
    BUDGET_CAP_STOP = "budget-cap-stop"
    BUDGET_STOP = "budget-stop"           # a job's own budget_usd reached while it ran: stopped
    BUDGET_OVERRUN = "budget-overrun"     # a budget's burn over its $/h ceiling (orchestrator.store.budget_watch)
    BUDGET_OVERRUN_ENDED = "budget-overrun-ended"
    # The store's own history (orchestrator/store/repo.py, requests.py) and `orch apply`.
    APPLY = "apply"
    JOB_CREATED = "job.created"
    JOB_UPDATED = "job.updated"
    JOB_ACTIVE = "job.active"             # desired state changes: job.<DesiredState value>
    JOB_PRUNED = "job.pruned"
    JOB_DELETED = "job.deleted"
    JOB_STATUS = "job.status"
    ADVISORY_NOTICE = "advisory-notice"   # a rebalance/maintenance notice: a checkpoint asked, the attempt goes on
    NODE_FAILED = "node-failed"           # a job's process exited non-zero: data carries its typed cause (failure.py)
    JOB_STOP_REQUESTED = "job.stop-requested"
    JOB_RELAUNCH_REQUESTED = "job.relaunch-requested"
    ATTEMPT_STATE = "attempt.state"
    CHECKPOINT = "checkpoint"


#: Conditions a waiting job meets again on every tick: written once, then counted (Event.count, last_ts).
REPEATING_EVENTS = frozenset({EventKind.NO_OFFER, EventKind.BUDGET_REFUSED, EventKind.LAUNCH_REFUSED,
                              EventKind.LAUNCH_FAILED, EventKind.WAITING})

#: Why an attempt's launch did not happen: what ``orch apply`` reports as a job's wait.
LAUNCH_WAITS = frozenset({EventKind.NO_OFFER, EventKind.LAUNCH_REFUSED, EventKind.LAUNCH_FAILED,
                          EventKind.BUDGET_REFUSED})
