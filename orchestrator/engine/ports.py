"""What the engine needs from the store, as one narrow protocol, and the values it trades in.

The engine is written against ``EngineStore`` so that its crash-safety rule is visible in one place: every
cloud-changing step writes the store BEFORE (``AttemptState.LAUNCH_REQUESTED`` with the launch id,
``TERMINATE_REQUESTED``) and AFTER (``LAUNCHED`` with the instance id, an end state with its ``EndCause``).
``orchestrator.store.sqlstore`` implements it on the SQL store; the state and cause enums are the engine's (``states``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from orchestrator.engine.events import EventKind
from orchestrator.engine.jobspec import JobSpec
from orchestrator.engine.recovery_policy import SpotRun
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from providers.base import Instance, Offer

if TYPE_CHECKING:
    from orchestrator.engine.values import GpuUtilSample, RelaunchRequest
    from orchestrator.manifest.schema import Manifest
    from orchestrator.money.budget_launch import BudgetVerdict, RefusedLimits
    from orchestrator.money.budgets import Budget, BudgetLedger, BudgetReview

__all__ = ["AttemptRecord", "EngineStore", "FleetSpotRun", "JobRecord"]


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    id: int
    job_id: int
    launch_id: str
    state: AttemptState
    offer: Offer
    instance_id: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    checkpoint_restored: str | None = None
    reason: str | None = None            # human text (events, status); nothing is decided from it
    end_cause: EndCause | None = None    # why it ended (or is being ended)
    drain_until: datetime | None = None  # a noticed machine keeps running until then (see EndCause.NOTICED)
    #: When its agent last showed it alive (engine clock; None: never) and since when the cloud has listed
    #: its machine UNREACHABLE: what the liveness deadlines count from (orchestrator/engine/liveness.py).
    heard_at: datetime | None = None
    unreachable_since: datetime | None = None
    #: The agent's own heartbeat value in the report heard at ``heard_at`` (its clock; only compared with
    #: its own later values): how a restarted daemon tells an agent that moved on from a silent one.
    heard_beat: datetime | None = None
    node_rank: int = 0
    #: $/h: the quote the machine was launched at, and what its cloud reports for it (None: nothing reported).
    launch_price_hr: float | None = None
    actual_price_hr: float | None = None
    #: Attempts planned together for one start of a multi-node job share a generation (a gang).
    generation: int = 0
    #: Derived per tick, never stored: where this gang's node 0 listens (its address, and the
    #: "<provider>/<instance id>" key whose node settings give the master port).
    master_addr: str | None = None
    master_key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    """A job as the engine sees it: the typed manifest (parsed once per manifest hash by the store) and
    what the engine derives from it (``spec``), with its status and totals."""

    id: int
    name: str
    manifest: Manifest
    spec: JobSpec
    status: JobStatus
    desired_active: bool
    relaunch_count: int
    spent_usd: float
    created_at: datetime


@dataclass(frozen=True, slots=True)
class FleetSpotRun:
    """One spot machine (node 0 of a launch) of any job of this owner, as the fleet's history of its place:
    the job it ran, its GPU model (the offer's; "" where the offer named none) and its life (``SpotRun``)."""

    job_id: int
    gpu: str
    run: SpotRun


class EngineStore(Protocol):
    """Every method commits before it returns: a crash after a call never loses what it wrote."""

    def begin_tick(self, now: datetime) -> None:
        """Called first in every tick (claims/renews row leases where several daemons share a store)."""
        ...
    def active_jobs(self) -> Sequence[JobRecord]: ...
    def jobs_to_tear_down(self) -> Sequence[JobRecord]: ...
    def job(self, job_id: int) -> JobRecord: ...
    def live_attempts(self) -> Sequence[AttemptRecord]:
        """Live attempts of the jobs this daemon handles (with leases: the jobs it holds)."""
        ...
    def draining_attempts(self, now: datetime) -> Sequence[AttemptRecord]:
        """Ended attempts of the jobs this daemon handles whose ``drain_until`` is after ``now``."""
        ...
    def all_live_launch_ids(self) -> set[str]:
        """Launch ids of every live attempt of every daemon: what is NOT an orphan or a straggler."""
        ...
    def attempts_for_job(self, job_id: int) -> Sequence[AttemptRecord]: ...
    def attempt_by_launch_id(self, launch_id: str) -> AttemptRecord | None: ...
    def spot_history(self, since: datetime) -> Sequence[FleetSpotRun]:
        """Node 0 of every spot launch of every job of this owner (every daemon's, leases or not) whose machine
        started and was up at some time from ``since`` on (not ended, or ended at or after it), oldest start
        first: the fleet's spot history (orchestrator/engine/recovery_facts.py reads it once per tick)."""
        ...
    def attempts_by_launch_ids(self, launch_ids: Sequence[str]) -> dict[str, AttemptRecord]: ...
    def wanted_jobs(self, job_ids: Sequence[int]) -> set[int]:
        """Those of ``job_ids`` still wanted (desired state active), whichever daemon holds them, if any."""
        ...
    def observe_instances(self, provider: str, instances: Sequence[Instance], now: datetime) -> None:
        """Mirror the cloud's view into the instances table (only rows whose state changed are written);
        an instance row becomes TERMINATED only here, when the cloud says so or no longer lists it."""
        ...

    def plan_attempt(self, job_id: int, offer: Offer, launch_id: str, checkpoint: str | None,
                     now: datetime, *, node_rank: int = 0, generation: int | None = None) -> AttemptRecord:
        """Write a PLANNED attempt. ``generation`` None starts a new one (latest + 1); a multi-node job's
        other ranks pass the generation of its node 0."""
        ...
    def plan_attempt_within(self, job_id: int, offer: Offer, launch_ids: Sequence[str], checkpoint: str | None,
                            now: datetime, admit: Callable[[BudgetLedger], BudgetVerdict], *, node_rank: int = 0,
                            generation: int | None = None) -> list[AttemptRecord] | BudgetVerdict:
        """``plan_attempt`` for a whole gang (node 0 of a new generation, then ranks 1.. of it, one per launch
        id) only if ``admit`` admits it, atomically across daemons: the ledger ``admit`` is asked with counts
        every attempt planned before (its $/h reserved until it ends), and no other engine checks between the
        check and these attempts' write, so the gang's whole $/h is reserved at once. Returns the attempts,
        node 0 first, or the refusing verdict. ``node_rank``/``generation`` given: the attempts are ranks
        ``node_rank``.. of that generation (a gang's rank retried or planned again beside its node 0)."""
        ...
    def set_attempt_state(self, attempt_id: int, state: AttemptState, now: datetime, *,
                          instance: Instance | None = None, reason: str | None = None,
                          cause: EndCause | None = None, drain_until: datetime | None = None) -> None:
        """Move the attempt on; ``cause``/``drain_until`` given are kept (None leaves the stored ones)."""
        ...
    def set_job_status(self, job_id: int, status: JobStatus, now: datetime, *, relaunched: bool = False) -> None: ...
    def add_spend(self, job_id: int, attempt_id: int, usd: float, since: datetime, until: datetime, *,
                  price_hr: float) -> None:
        """Charge ``usd`` for ``[since, until)`` (inside one UTC day) at ``price_hr``."""
        ...
    def last_checkpoint(self, job_id: int) -> str | None: ...
    def settle_before_reads(self, settle: Callable[[], None]) -> None:
        """``settle`` charges what the engine holds unsettled (its spend meters, orchestrator/engine/spend.py) into
        this store: called before this store's own reads of spend and writes of everything it buffers, so those
        are exact to the last tick."""
        ...
    def spend_mark(self, attempt_id: int) -> datetime | None:
        """Up to when the attempt's spend is recorded (a restarted daemon continues from there)."""
        ...
    def record_checkpoint(self, job_id: int, attempt_id: int, uri: str, step: int | None, at: datetime) -> None: ...
    def note_liveness(self, attempt_id: int, *, heard_at: datetime | None, unreachable_since: datetime | None,
                      heard_beat: datetime | None = None) -> None:
        """Store the liveness marks of a live attempt as given (None clears ``unreachable_since``)."""
        ...
    def event(self, kind: EventKind, message: str, now: datetime, *, job_id: int | None = None,
              data: dict[str, object] | None = None) -> None:
        """Record one event; ``kind`` must be an ``EventKind`` member (a string that is not one is refused)."""
        ...
    def use_catalog(self, offers: Sequence[Offer]) -> None:
        """The engine's catalog was refreshed: rebuild attempts' offers from these rows from now on."""
        ...
    def record_gpu_util(self, samples: Sequence[GpuUtilSample]) -> None:
        """Keep the agents' GPU utilization readings of this tick (per attempt, per minute) for the console."""
        ...
    def gpu_util_since(self, attempt_ids: Sequence[int], since: datetime) -> Sequence[GpuUtilSample]:
        """The kept readings of these attempts from ``since`` on (coarser than recorded: at most one per minute,
        its highest reading, stamped no earlier than the readings it stands for): a new process's idle windows."""
        ...
    def relaunch_requests(self, job_ids: Sequence[int]) -> Sequence[RelaunchRequest]:
        """The open "relaunch now" requests of these jobs, oldest first (left open)."""
        ...
    def take_relaunch_requests(self, now: datetime, job_ids: Sequence[int]) -> Sequence[RelaunchRequest]:
        """Mark the open requests of these jobs taken (never taken twice); returns them."""
        ...
    def budget_ledger(self, now: datetime) -> BudgetLedger:
        """Every job's spend this calendar month and $/h burning now, from the spend rollup (all daemons')."""
        ...
    def review_budgets(self, budgets: Sequence[Budget], now: datetime) -> BudgetReview:
        """Review the budgets at ``now`` and write each threshold crossed for the first time this month as a
        ``budget-threshold`` event, in one transaction (once per threshold per month, across restarts)."""
        ...
    def last_refusal(self, job_id: int) -> RefusedLimits | None:
        """The limits named by the job's newest ``budget-refused`` event, unless an attempt of the job was
        planned since (or in that tick); None otherwise: whether a refusal this daemon did not write is news."""
        ...
