"""The deadline-aware spot problem, as values: what is given, what a policy sees, what it may do.

Units: hours everywhere, prices relative to the on-demand price (on-demand costs 1 per hour).

The rules (the simulator applies them, the optimum solves them):
- Time runs in ticks of ``gap_h``. At each tick the policy chooses WAIT, ON_DEMAND or SPOT(zone).
- Every new instance (first launch, after a preemption, every switch of zone or market) bills its first
  ``overhead_h`` hours and makes no progress during them. Stopping (WAIT) costs nothing.
- A spot instance in a zone whose availability drops to 0 is preempted at the start of that tick and is not
  billed for it. On-demand is always available. Progress survives preemptions (checkpoints).
- Cost = sum of price x billed hours; the job must finish ``work_h`` hours of work within ``deadline_h``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum


class ProblemError(ValueError):
    """A problem statement that cannot be posed (deadline not after the work, negative price, ...)."""


@dataclass(frozen=True, slots=True)
class ProblemSpec:
    """One job: ``work_h`` of work due ``deadline_h`` after its start; ``overhead_h`` per new instance.

    ``spot_price`` is the spot price relative to on-demand when a zone gives no price series of its own.
    """

    work_h: float
    deadline_h: float
    overhead_h: float
    spot_price: float = 0.3

    def __post_init__(self) -> None:
        for name in ("work_h", "deadline_h", "overhead_h", "spot_price"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ProblemError(f"{name} must be a finite number, got {value}")
        if self.work_h <= 0:
            raise ProblemError(f"work must be positive, got {self.work_h} h")
        if self.overhead_h < 0:
            raise ProblemError(f"overhead must not be negative, got {self.overhead_h} h")
        if self.spot_price < 0:
            raise ProblemError(f"spot price must not be negative, got {self.spot_price}")
        if self.deadline_h <= self.work_h:
            raise ProblemError(f"deadline ({self.deadline_h:g} h) must be longer than the work ({self.work_h:g} h)")
        if self.overhead_h >= self.deadline_h:
            raise ProblemError(f"overhead ({self.overhead_h:g} h) must be shorter than the deadline "
                               f"({self.deadline_h:g} h)")
        if self.work_h + self.overhead_h > self.deadline_h:
            raise ProblemError(f"work + one overhead ({self.work_h + self.overhead_h:g} h) does not fit in the "
                               f"deadline ({self.deadline_h:g} h): not even on-demand can make it")

    @property
    def on_demand_cost(self) -> float:
        """What on-demand alone costs: one overhead and the work, at price 1. Costs are normalized by it."""
        return self.work_h + self.overhead_h


class Mode(Enum):
    IDLE = "idle"
    ON_DEMAND = "on-demand"
    SPOT = "spot"


@dataclass(frozen=True, slots=True)
class Action:
    """WAIT, ON_DEMAND or SPOT in ``zone`` (an index into the observation's zones)."""

    mode: Mode
    zone: int | None = None

    def __post_init__(self) -> None:
        if (self.mode is Mode.SPOT) != (self.zone is not None):
            raise ValueError("a SPOT action names a zone, and only a SPOT action does")

    def __str__(self) -> str:
        return f"spot[{self.zone}]" if self.mode is Mode.SPOT else self.mode.value


WAIT = Action(Mode.IDLE)
ON_DEMAND = Action(Mode.ON_DEMAND)


_SPOT_ACTIONS: dict[int, Action] = {}


def spot(zone: int) -> Action:
    """SPOT in ``zone`` (one shared value per zone: actions are immutable)."""
    action = _SPOT_ACTIONS.get(zone)
    if action is None:
        action = _SPOT_ACTIONS[zone] = Action(Mode.SPOT, zone)
    return action


@dataclass(slots=True, weakref_slot=True)
class ZoneStats:
    """What has been seen of one zone so far (never the future): fillable from live facts too.

    The daemon fills it from its own record (capacity errors = unavailable, preemptions = the end of an
    available run); the simulator from the trace ticks it has shown the policy.
    """

    seen_h: float = 0.0            # hours observed
    up_h: float = 0.0              # of which spot was available
    ended_up_runs: int = 0         # available runs that ended (a preemption, for a job on it)
    ended_up_h: float = 0.0        # their total length
    available: bool = False        # state now
    streak_h: float = 0.0          # how long the state now has lasted
    # The lengths of the most recent ended runs (at most MAX_RUNS each): the run-length distributions a
    # forecasting policy estimates spot lifetimes and outage lengths from. Oldest first.
    up_runs: list[float] = field(default_factory=list)
    down_runs: list[float] = field(default_factory=list)
    runs_recorded: int = 0         # how many runs record_run has kept, ever (a cache key for their tables)

    #: How many ended runs of each kind are kept (the oldest go first).
    MAX_RUNS = 200

    def observe(self, available: bool, gap_h: float) -> None:
        """One more tick of ``gap_h`` hours in state ``available``."""
        if available != self.available and self.seen_h > 0:
            if self.available:
                self.ended_up_runs += 1
                self.ended_up_h += self.streak_h
                self.record_run(True, self.streak_h)
            else:
                self.record_run(False, self.streak_h)
            self.streak_h = 0.0
        self.available = available
        self.seen_h += gap_h
        self.streak_h += gap_h
        if available:
            self.up_h += gap_h

    def observe_run(self, available: bool, ticks: int, gap_h: float) -> None:
        """``ticks`` ticks in state ``available``: exactly what ``observe`` called that many times does (the
        same float additions, in the same order), without a call per tick."""
        if ticks <= 0:
            return
        self.observe(available, gap_h)
        seen, streak, up = self.seen_h, self.streak_h, self.up_h
        for _ in range(ticks - 1):
            seen += gap_h
            streak += gap_h
            if available:
                up += gap_h
        self.seen_h, self.streak_h, self.up_h = seen, streak, up

    def record_run(self, up: bool, hours: float) -> None:
        """Keep one ended run's length (the counters above are the caller's: ``observe`` keeps both)."""
        runs = self.up_runs if up else self.down_runs
        runs.append(hours)
        self.runs_recorded += 1
        if len(runs) > self.MAX_RUNS:
            del runs[: len(runs) - self.MAX_RUNS]

    @property
    def up_fraction(self) -> float | None:
        return self.up_h / self.seen_h if self.seen_h > 0 else None

    def mean_up_h(self, prior_h: float, prior_weight: float = 1.0) -> float:
        """Mean length of an available run, shrunk towards ``prior_h`` (worth ``prior_weight`` runs).

        The run in progress counts with what it has lasted so far: a long streak is evidence of long runs.
        """
        runs = self.ended_up_runs + prior_weight
        total = self.ended_up_h + prior_h * prior_weight
        if self.available:
            runs += 1
            total += self.streak_h
        return total / runs


@dataclass(frozen=True, slots=True)
class Observation:
    """What a policy sees at the start of one tick. Nothing here comes from the future.

    ``available[z]``: zone z has spot now. ``notice[z]``: the cloud has said a spot instance in z will be
    preempted at the next tick (empty tuple when no notice service exists). ``preempted``: the instance the
    job was on was taken away at the start of this tick (the job is now idle). ``history[z]``: what has been
    seen of zone z so far; a live view, valid during ``decide`` only (the simulator updates it in place rather
    than copying it every tick): read it, never change it, copy what must be kept. ``any_zone``: the same
    for "some zone of the set has spot" (None: not known; a policy may then use ``history[0]`` alone).
    ``spent``: what the job has been billed so far, in hours of on-demand (None: not known).
    """

    tick: int
    elapsed_h: float
    gap_h: float
    spec: ProblemSpec
    work_done_h: float
    mode: Mode
    zone: int | None
    overhead_left_h: float
    available: tuple[bool, ...]
    spot_prices: tuple[float, ...]
    notice: tuple[bool, ...] = ()
    preempted: bool = False
    history: tuple[ZoneStats, ...] = field(default=())
    any_zone: ZoneStats | None = None
    spent: float | None = None

    @property
    def remaining_h(self) -> float:
        return max(self.spec.work_h - self.work_done_h, 0.0)

    @property
    def time_left_h(self) -> float:
        return self.spec.deadline_h - self.elapsed_h

    @property
    def slack_h(self) -> float:
        """Time left minus work left: what may still go to waiting and overheads."""
        return self.time_left_h - self.remaining_h

    @property
    def zones(self) -> int:
        return len(self.available)

    def launchable(self) -> list[int]:
        """The zones a spot instance may be launched into now: spot available, no preemption announced."""
        return [z for z, up in enumerate(self.available) if up and not (self.notice and self.notice[z])]
