"""The states and causes the engine decides on: jobs, attempts, end causes, operators' requests.

The engine owns them; the store's tables (orchestrator/store/models.py) hold their values as strings. Nothing
here imports a database library, so the engine can be imported without one (tests/test_engine_imports.py).
"""

from __future__ import annotations

from enum import StrEnum


class DesiredState(StrEnum):
    ACTIVE = "active"      # in the applied manifests: keep it running until it finishes
    PRUNED = "pruned"      # gone from the manifests with --prune: stop it, keep its history
    DELETED = "deleted"    # `orch down`: stop it and forget it in listings


class JobStatus(StrEnum):
    PENDING = "pending"
    LAUNCHING = "launching"
    RUNNING = "running"
    RECOVERING = "recovering"   # preempted or lost; relaunching from the last checkpoint
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"         # by idle policy, budget, deadline, prune or down

    @property
    def is_final(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)


class EndCause(StrEnum):
    """Why an attempt ended (or is being ended): what the engine decides draining and sweeping from.

    ``Attempt.reason`` keeps the human text for events and ``orch status``; nothing is decided from it.
    """

    PREEMPTED = "preempted"              # the cloud reclaimed the machine
    NOTICED = "noticed"                  # a preemption notice arrived; drained (``drain_until``) or ended at once
    LOST = "lost"                        # an on-demand machine vanished (or stopped answering for good)
    SUCCEEDED = "succeeded"              # the job's process exited 0
    FAILED = "failed"                    # the job's process exited non-zero
    IDLE_STOPPED = "idle-stopped"        # idle: stopped on purpose, keeping its disk (the sweep leaves it)
    IDLE_TERMINATED = "idle-terminated"  # idle: terminated
    DOWN = "down"                        # the job was torn down (orch down, prune)
    GANG = "gang"                        # another node of its multi-node gang ended, so the gang restarts
    DEADLINE_MOVE = "deadline-move"      # moved off spot so the deadline holds
    LAUNCH_REFUSED = "launch-refused"    # the cloud refused (capacity, quota): the next offer is tried
    LAUNCH_FAILED = "launch-failed"      # the launch failed otherwise (ambiguous error, no startup script)
    BUDGET_CAP = "budget-cap"            # a budget reached its monthly cap (stop_at_cap): drained, then ended
    BUDGET_STOP = "budget-stop"          # the job's own budget_usd was spent while it ran: the job is stopped
    RELAUNCH_REQUESTED = "relaunch-requested"   # an operator asked to relaunch the job now (the web console)
    BOOT_TIMEOUT = "boot-timeout"        # its agent never reported within the boot timeout: ended, place cooled
    SILENT = "silent"                    # its agent went silent for the heartbeat timeout: the node is lost
    UNREACHABLE = "unreachable"          # the cloud listed it unreachable past the grace: the node is lost


class AttemptState(StrEnum):
    PLANNED = "planned"
    LAUNCH_REQUESTED = "launch_requested"   # written BEFORE the cloud call: a crash leaves a launch id to adopt
    LAUNCHED = "launched"
    BOOTSTRAPPING = "bootstrapping"
    RUNNING = "running"
    TERMINATE_REQUESTED = "terminate_requested"   # orch asked the cloud to end it; gone once confirmed
    PREEMPTED = "preempted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TERMINATED = "terminated"

    @property
    def is_final(self) -> bool:
        return self in FINAL_ATTEMPT_STATES

    @property
    def is_live(self) -> bool:
        """Not final: the attempt may still own a machine."""
        return self not in FINAL_ATTEMPT_STATES


FINAL_ATTEMPT_STATES = frozenset({AttemptState.PREEMPTED, AttemptState.SUCCEEDED, AttemptState.FAILED,
                                  AttemptState.TERMINATED})
_FORWARD = (AttemptState.PLANNED, AttemptState.LAUNCH_REQUESTED, AttemptState.LAUNCHED,
            AttemptState.BOOTSTRAPPING, AttemptState.RUNNING, AttemptState.TERMINATE_REQUESTED)

# planned -> launch_requested -> launched -> bootstrapping -> running -> terminate_requested, and from any of
# these to an end.
# Steps may be skipped forward (a poll can find a machine already running); nothing goes back.
ATTEMPT_TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    state: frozenset(_FORWARD[i + 1:]) | FINAL_ATTEMPT_STATES for i, state in enumerate(_FORWARD)
} | {state: frozenset() for state in FINAL_ATTEMPT_STATES}


class RequestKind(StrEnum):
    RELAUNCH = "relaunch"     # end the job's machines (if any) and launch it again now, from its last checkpoint
