"""The store's tables. Jobs are desired state; instances, attempts, checkpoints, events and spend are history.

Every timestamp is an aware UTC datetime. Changing a table means a new Alembic migration in
orchestrator/store/migrations/versions/ (tests/test_migrations.py checks the models and migrations agree).
"""

from __future__ import annotations

from datetime import date, datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlmodel import JSON, Column, Field, SQLModel

from orchestrator.clock import utcnow
from orchestrator.store.types import UTCDateTime
from providers.base import GONE_INSTANCE_STATES


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
    BUDGET_CAP = "budget-cap"            # a budget reached its monthly cap (stop_spot_at_cap): drained, then ended
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


#: ``providers.base.GONE_INSTANCE_STATES`` as the strings the instances table holds.
GONE_INSTANCE_STATE_VALUES: tuple[str, ...] = tuple(sorted(s.value for s in GONE_INSTANCE_STATES))

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



class Job(SQLModel, table=True):
    __tablename__ = "jobs"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(sa_column=Column(sa.String(63), nullable=False, unique=True))
    manifest: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    manifest_hash: str = Field(sa_column=Column(sa.String(80), nullable=False))
    source_path: str | None = Field(default=None)
    desired_state: str = Field(default=DesiredState.ACTIVE.value, index=True)
    status: str = Field(default=JobStatus.PENDING.value, index=True)
    status_reason: str | None = Field(default=None)
    applied_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    relaunch_count: int = Field(default=0, nullable=False)
    #: The daemon driving this job (a ``daemons.owner``); the lease holds while that daemon's registration
    #: is live (orchestrator/store/fleet.py). None: no daemon holds it.
    lease_owner: str | None = Field(default=None, index=True)
    #: Bumped each time a daemon takes the job: every write made on the job's behalf checks it (the fence).
    lease_generation: int = Field(default=0, nullable=False)


class DaemonRow(SQLModel, table=True):
    """One daemon sharing a PostgreSQL store: its heartbeat. Its job leases hold while ``expires_at`` is ahead.

    ``epoch`` is drawn anew each time the daemon (re)joins: a daemon whose registration lapsed (paused,
    partitioned) and was reaped by another comes back with a new epoch, so nothing it began under the old
    one passes the fence.
    """

    __tablename__ = "daemons"

    owner: str = Field(sa_column=Column(sa.String(140), primary_key=True))
    epoch: int = Field(sa_column=Column(sa.BigInteger, nullable=False))
    started_at: datetime = Field(sa_type=UTCDateTime, nullable=False)
    heartbeat_at: datetime = Field(sa_type=UTCDateTime, nullable=False)
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False, index=True)


class ListingRow(SQLModel, table=True):
    """The last listing of one provider's instances of one owner, published for the fleet (several daemons on
    PostgreSQL): one daemon per provider per tick asks the cloud, the others read it here
    (orchestrator/store/listings.py). ``version`` rises with each publication; ``listed_at`` is the lister's
    clock when it asked; ``instances`` holds ``Instance`` values as JSON (rewritten only when they changed)."""

    __tablename__ = "listings"

    provider: str = Field(sa_column=Column(sa.String(40), primary_key=True))
    owner: str = Field(sa_column=Column(sa.String(140), primary_key=True))
    version: int = Field(sa_column=Column(sa.BigInteger, nullable=False))
    listed_at: datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    lister: str | None = Field(default=None, sa_column=Column(sa.String(140), nullable=True))
    #: A digest of ``instances``: a reader that decoded the same listing before does not fetch it again.
    digest: str = Field(default="", sa_column=Column(sa.String(64), nullable=False))
    instances: list[Any] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))


class StoreIdentityRow(SQLModel, table=True):
    """This store's identity: one row, its id drawn once when the table was made (migration 0008). Every
    launch id carries it, so two stores on one cloud account and owner tell their machines apart."""

    __tablename__ = "store_identity"

    id: int = Field(default=1, primary_key=True)
    store_id: str = Field(sa_column=Column(sa.String(16), nullable=False))
    created_at: datetime = Field(sa_type=UTCDateTime, nullable=False)


class InstanceRow(SQLModel, table=True):
    """One machine orch asked a cloud for, keyed by orch's launch id (known before the cloud answers)."""

    __tablename__ = "instances"

    id: int | None = Field(default=None, primary_key=True)
    provider: str = Field(nullable=False)
    instance_id: str | None = Field(default=None, index=True)   # the cloud's id, once it answered
    launch_id: str = Field(sa_column=Column(sa.String(64), nullable=False, unique=True))
    owner: str = Field(nullable=False)
    job_id: int | None = Field(default=None, foreign_key="jobs.id", index=True)
    instance_type: str = Field(default="")
    region: str = Field(default="")
    zone: str | None = Field(default=None)
    market: str = Field(default="on-demand")
    price_hr: float = Field(default=0.0)                          # the offer's (quoted) $/h
    actual_price_hr: float | None = Field(default=None)          # what the cloud reports for it, where it does
    gpu: str = Field(default="")
    gpu_count: int = Field(default=0)
    state: str = Field(default="pending", index=True)
    raw_state: str | None = Field(default=None)
    public_ip: str | None = Field(default=None)
    ssh_port: int | None = Field(default=None)
    ssh_user: str | None = Field(default=None)
    host_keys: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    terminated_at: datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)


class Attempt(SQLModel, table=True):
    """One node of one launch of a job. A job's n-th launch is ``generation`` n; its nodes share it."""

    __tablename__ = "attempts"

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="jobs.id", index=True, nullable=False)
    generation: int = Field(default=0, nullable=False)
    node_rank: int = Field(default=0, nullable=False)
    launch_id: str = Field(sa_column=Column(sa.String(64), nullable=False, unique=True))
    state: str = Field(default=AttemptState.PLANNED.value, index=True)
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    #: Indexed: the fleet's spot history reads the machines not ended or ended in the last days.
    ended_at: datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True, index=True)
    checkpoint_restored: str | None = Field(default=None)    # the checkpoint URI this attempt resumed from
    exit_code: int | None = Field(default=None)
    reason: str | None = Field(default=None)          # human text for events and status; never parsed
    end_cause: str | None = Field(default=None)       # an EndCause value, once it is being ended
    #: A noticed machine (and its gang) keeps running until then so its checkpoint uploads; the sweep ends it
    #: after, and a replacement waits for it (until it has committed and stopped) before starting its job.
    drain_until: datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True, index=True)
    #: The engine's clock when the node's agent last showed it was alive (a report whose heartbeat moved on);
    #: None: never. Written at most every quarter heartbeat timeout (orchestrator/engine/liveness.py).
    heard_at: datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    #: The agent's own heartbeat (its clock) in the report heard at ``heard_at``: a restarted daemon tells an
    #: agent that moved on from a silent one by it. None: the report carried none, or never heard.
    heard_beat: datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    #: Since when the cloud has listed the machine UNREACHABLE (None: it does not); the grace counts from here.
    unreachable_since: datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class CheckpointRow(SQLModel, table=True):
    __tablename__ = "checkpoints"

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="jobs.id", index=True, nullable=False)
    attempt_id: int | None = Field(default=None, foreign_key="attempts.id")
    uri: str = Field(nullable=False)
    step: int | None = Field(default=None)
    committed_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class Event(SQLModel, table=True):
    """History: what orch did and saw, for ``orch status`` and post-mortems.

    Rows are never deleted. A repeated condition (``REPEATING_EVENTS``: the same job, kind and message again,
    with no other kind of event of that job in between) is the same fact seen again: its row's ``count`` rises
    and ``last_ts`` moves, instead of a new row per tick (orchestrator.store.repo.record_event).
    """

    __tablename__ = "events"

    id: int | None = Field(default=None, primary_key=True)
    ts: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False, index=True)
    job_id: int | None = Field(default=None, foreign_key="jobs.id", index=True)
    kind: str = Field(nullable=False, index=True)
    message: str = Field(default="")
    data: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    count: int = Field(default=1, nullable=False, sa_column_kwargs={"server_default": "1"})
    last_ts: datetime | None = Field(default=None, sa_type=UTCDateTime)   # the last time it was seen (None: ts)

    @property
    def seen_at(self) -> datetime:
        """When this condition was last seen (``ts`` for an event seen once)."""
        return self.last_ts or self.ts


#: Conditions a waiting job meets again on every tick: written once, then counted (Event.count, last_ts).
REPEATING_EVENTS = frozenset({"no-offer", "budget-refused", "launch-refused", "launch-failed", "waiting"})


class Spend(SQLModel, table=True):
    """Money spent by one attempt over [from_ts, to_ts): rows never overlap for one attempt.

    The engine keeps ONE row per attempt, UTC ``day`` and ``charged_price_hr`` (the $/h it charged: the
    cloud's reported price, else the quote at launch) and extends it each tick (an upsert on that key), so
    the ledger grows with attempts and days, not ticks. Rows never straddle a UTC midnight. Rows written
    without a day (before revision 0006, or by hand with ``repo.record_spend``) stay as they are.
    """

    __tablename__ = "spend"
    __table_args__ = (sa.UniqueConstraint("attempt_id", "day", "charged_price_hr", name="uq_spend_attempt_day_rate"),)

    id: int | None = Field(default=None, primary_key=True)
    attempt_id: int | None = Field(default=None, foreign_key="attempts.id", index=True)
    job_id: int = Field(foreign_key="jobs.id", index=True, nullable=False)
    from_ts: datetime = Field(sa_type=UTCDateTime, nullable=False)
    to_ts: datetime = Field(sa_type=UTCDateTime, nullable=False)
    usd: float = Field(nullable=False)
    day: date | None = Field(default=None, sa_column=Column(sa.Date(), nullable=True))
    charged_price_hr: float | None = Field(default=None)


class RequestKind(StrEnum):
    RELAUNCH = "relaunch"     # end the job's machines (if any) and launch it again now, from its last checkpoint


class JobRequest(SQLModel, table=True):
    """An operator's request the engine honours on its next tick (from the web console).

    Taken once: ``take_relaunch_requests`` sets ``taken_at``; the row stays as history.
    """

    __tablename__ = "job_requests"

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="jobs.id", index=True, nullable=False)
    kind: str = Field(nullable=False)                      # a RequestKind value
    requested_at: datetime = Field(sa_type=UTCDateTime, nullable=False)
    requested_by: str = Field(default="console", nullable=False)
    taken_at: datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True, index=True)


class GpuUtilMinute(SQLModel, table=True):
    """GPU utilization of one attempt's machine over one UTC minute: the mean and max of its samples.

    Each sample is one reading of every GPU of the machine (its mean and its busiest GPU count). Rows
    older than the retention period are pruned as new minutes are recorded.
    """

    __tablename__ = "gpu_util"
    __table_args__ = (sa.UniqueConstraint("attempt_id", "minute", name="uq_gpu_util_attempt_minute"),)

    id: int | None = Field(default=None, primary_key=True)
    attempt_id: int = Field(foreign_key="attempts.id", nullable=False)
    job_id: int = Field(foreign_key="jobs.id", index=True, nullable=False)
    minute: datetime = Field(sa_type=UTCDateTime, nullable=False, index=True)
    samples: int = Field(default=0, nullable=False)
    mean_pct: float = Field(default=0.0, nullable=False)   # mean over the minute's samples of the GPUs' mean
    max_pct: float = Field(default=0.0, nullable=False)    # the busiest GPU in any sample of the minute


TABLES = (Job, DaemonRow, InstanceRow, Attempt, CheckpointRow, Event, Spend, JobRequest, GpuUtilMinute)
