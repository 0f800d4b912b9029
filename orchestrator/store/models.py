"""The store's tables. Jobs are desired state; instances, attempts, checkpoints, events and spend are history.

Every timestamp is an aware UTC datetime. Changing a table means a new Alembic migration in
orchestrator/store/migrations/versions/ (tests/test_migrations.py checks the models and migrations agree).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import JSON, Column, Field, SQLModel

from orchestrator.clock import utcnow
from orchestrator.engine.states import (
    AttemptState,
    DesiredState,
    JobStatus,
)
from orchestrator.store.types import UTCDateTime
from providers.base import GONE_INSTANCE_STATES, InstanceState, Market

#: ``providers.base.GONE_INSTANCE_STATES`` as the strings the instances table holds.
GONE_INSTANCE_STATE_VALUES: tuple[str, ...] = tuple(sorted(s.value for s in GONE_INSTANCE_STATES))


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


class StoreChangesRow(SQLModel, table=True):
    """How many committed transactions wrote the jobs and the attempts tables (PostgreSQL: bumped once per
    writing transaction, as it commits, by the deferred triggers of migration 0012; SQLite: unused, it has
    ``PRAGMA data_version``). Equal counts: nobody wrote those rows in between, so a daemon's steady tick reads
    this one row instead of digesting the fleet's rows (orchestrator/store/changes.py)."""

    __tablename__ = "store_changes"

    id: int = Field(default=1, primary_key=True)
    jobs: int = Field(default=0, sa_column=Column(sa.BigInteger, nullable=False))
    attempts: int = Field(default=0, sa_column=Column(sa.BigInteger, nullable=False))
    #: The transactions that wrote job_requests (migration 0013): the open relaunch requests are read again
    #: only when it (or ``jobs``) moved.
    requests: int = Field(default=0, sa_column=Column(sa.BigInteger, nullable=False, server_default="0"))


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

    # The columns hold text (no migration: the values are the members'); these type it where a row is read.
    @property
    def typed_state(self) -> InstanceState:
        """``state`` as its member; ValueError for stored text that names none."""
        return InstanceState(self.state)

    @property
    def typed_market(self) -> Market:
        """``market`` as its member; ValueError for stored text that names none."""
        return Market(self.market)


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

    Rows are never deleted. A repeated condition (``engine.events.REPEATING_EVENTS``: the same job, kind and message
    again, with no other kind of event of that job in between) is the same fact seen again: its row's ``count`` rises
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
