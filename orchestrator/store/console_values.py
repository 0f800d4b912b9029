"""The frozen values the web console's queries (store.console_queries) return: what one page shows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.engine.events import EventKind
from orchestrator.engine.states import AttemptState, DesiredState, JobStatus
from orchestrator.engine.values import RelaunchRequest
from orchestrator.manifest.schema import MarketChoice
from providers.base import BURNING_INSTANCE_STATES, InstanceState, Market

# -- values --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EventRow:
    id: int
    ts: datetime
    job: str | None
    kind: EventKind
    message: str
    count: int = 1                       # times this condition was seen (one row, counted: models.Event)
    last_ts: datetime | None = None      # when it was last seen (None: only at ts)


@dataclass(frozen=True, slots=True)
class UtilPoint:
    minute: datetime
    mean_pct: float
    max_pct: float


@dataclass(frozen=True, slots=True)
class FleetNode:
    """One machine of a job that may still bill: its attempt (node rank, generation) and its instance row."""

    attempt_id: int | None
    generation: int
    node_rank: int
    launch_id: str
    attempt_state: AttemptState | None
    provider: str
    instance_id: str | None
    instance_type: str
    region: str
    zone: str | None
    market: Market
    gpu: str
    gpu_count: int
    state: InstanceState
    quoted_hr: float                 # the offer's $/h
    actual_hr: float | None          # what the cloud reports, where it does
    util: tuple[UtilPoint, ...] = ()  # per minute, oldest first

    @property
    def price_now_hr(self) -> float:
        """What this machine is charged per hour: the cloud's price where known, else the quote."""
        return self.actual_hr if self.actual_hr is not None and self.actual_hr >= 0 else self.quoted_hr

    @property
    def burning(self) -> bool:
        return self.state in BURNING_INSTANCE_STATES


@dataclass(frozen=True, slots=True)
class FleetJob:
    id: int
    name: str
    status: JobStatus
    status_reason: str | None
    desired: DesiredState
    relaunches: int
    spent_usd: float
    budget_usd: float | None
    nodes: tuple[FleetNode, ...]
    last_event: EventRow | None

    @property
    def burn_hr(self) -> float:
        return sum(n.price_now_hr for n in self.nodes if n.burning)

    @property
    def still_billing(self) -> bool:
        """Over or no longer wanted, yet a machine of it still burns (a terminate in flight, refused or
        unanswered): its badge may say ``stopped`` while it bills, so the page says so (as ``orch status``'s
        ``stopping!`` does)."""
        ending = self.desired is not DesiredState.ACTIVE or self.status.is_final
        return ending and any(n.burning for n in self.nodes)


@dataclass(frozen=True, slots=True)
class Fleet:
    at: datetime
    jobs: tuple[FleetJob, ...]

    @property
    def burn_hr(self) -> float:
        return sum(j.burn_hr for j in self.jobs)

    @property
    def machines(self) -> int:
        return sum(len(j.nodes) for j in self.jobs)

    @property
    def spent_usd(self) -> float:
        return sum(j.spent_usd for j in self.jobs)


@dataclass(frozen=True, slots=True)
class JobBudget:
    """A job's own budget (the manifest's ``policies.budget_usd``) and its spend so far."""

    job: str
    status: JobStatus
    budget_usd: float | None
    spent_usd: float


@dataclass(frozen=True, slots=True)
class EventFilter:
    job: str | None = None
    kinds: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class EventPage:
    rows: tuple[EventRow, ...]
    total: int
    page: int            # 1-based
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


@dataclass(frozen=True, slots=True)
class AttemptView:
    id: int
    generation: int
    node_rank: int
    launch_id: str
    state: AttemptState
    provider: str
    instance_id: str | None
    instance_type: str
    region: str
    zone: str | None
    market: Market | None            # None: no instance row (the cloud never answered the launch)
    quoted_hr: float
    actual_hr: float | None
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    reason: str | None
    checkpoint_restored: str | None
    #: How a person logs in to the machine (orchestrator/config/reach.py); shown while the attempt is live.
    reach: str = ""


@dataclass(frozen=True, slots=True)
class CheckpointView:
    uri: str
    step: int | None
    committed_at: datetime
    attempt_id: int | None


@dataclass(frozen=True, slots=True)
class JobDetail:
    id: int
    name: str
    status: JobStatus
    status_reason: str | None
    desired: DesiredState
    relaunches: int
    created_at: datetime
    applied_at: datetime
    spent_usd: float
    budget_usd: float | None
    gpu: str                         # what the manifest asks for, e.g. "1x A100-80G, H100-80G"
    market: MarketChoice | None      # what the manifest asks for; None: it names none
    source_path: str | None
    attempts: tuple[AttemptView, ...]     # oldest first
    checkpoints: tuple[CheckpointView, ...]   # oldest first
    events: tuple[EventRow, ...]          # newest first, at most ``event_limit``
    events_total: int
    open_relaunch: RelaunchRequest | None
