"""Budgets that hold across jobs: a monthly $ cap and a $/h ceiling, per project or for everything.

Pure: the config's ``budgets:`` section becomes ``Budget`` values; the facts of one instant come in as a
``BudgetLedger`` (each job's spend this month and the $/h its machines burn now, from the store's rollup);
decisions go out as values: ``review`` -> ``BudgetReview`` (which alert thresholds were crossed, which budgets
are at their cap and which jobs' machines must stop: ``stop_at_cap``); a launch is checked by
``orchestrator.money.budget_launch``. The engine and the CLI read the store and act; nothing here does I/O.

    budgets:
      - name: everything              # no match: every job counts
        monthly_usd: 5000
        max_usd_per_hour: 60
      - name: nlp
        match: {project: nlp}         # jobs whose manifest says project: nlp (or a list: [nlp, speech])
                                      # owner: alice: jobs whose machines orch owner alice launches (both: both)
        monthly_usd: 2000
        max_usd_per_hour: 40
        alert_at: [0.5, 0.8, 1.0]     # fractions of monthly_usd (the default)
        stop_at_cap: all              # at the cap, end its running paid machines after a drain: none (the
                                      # default), spot (the older stop_spot_at_cap: true) or all

(orchestrator.config.budgets reads the section.) The month is the calendar month in UTC. A launch is
refused when its $/h on top of what the budget's jobs burn now would exceed ``max_usd_per_hour``, or when
the month's spend plus the launch's estimated cost until the month ends would exceed ``monthly_usd``. Free
machines ($0/h: your own) are never refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum

DEFAULT_ALERT_AT = (0.5, 0.8, 1.0)


class BudgetLimit(StrEnum):
    HOURLY = "max_usd_per_hour"
    MONTHLY = "monthly_usd"


class CapStop(StrEnum):
    """Which running machines of its jobs a budget ends at its monthly cap (config ``stop_at_cap``), besides
    refusing their launches. A machine at $0/h (your own) is never ended: it costs nothing."""

    NONE = "none"       # none: they run on (the default)
    SPOT = "spot"       # the spot ones (the older ``stop_spot_at_cap: true``)
    ALL = "all"         # every paid one, spot and on-demand: the cap holds

    def ends(self, *, spot: bool, price_hr: float) -> bool:
        """Does this stop end a running machine of the budget's jobs, on spot or not, billing ``price_hr``?"""
        if price_hr <= 0:
            return False
        return self is CapStop.ALL or (self is CapStop.SPOT and spot)

    @property
    def width(self) -> int:
        """How much it ends: of several budgets at their cap over one job, the widest stop holds."""
        return _CAP_STOP_WIDTH[self]


_CAP_STOP_WIDTH = {CapStop.NONE: 0, CapStop.SPOT: 1, CapStop.ALL: 2}


# -- the config ------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BudgetMatch:
    """Which jobs a budget counts: those of these projects and of these owners (the orch ``owner`` whose
    engine launches their machines); neither means every job."""

    projects: frozenset[str] = frozenset()
    owners: frozenset[str] = frozenset()

    def covers(self, project: str | None, owner: str | None = None) -> bool:
        return ((not self.projects or project in self.projects)
                and (not self.owners or owner in self.owners))

    def describe(self) -> str:
        parts = [f"{what} {', '.join(sorted(names))}" for what, names in (("project", self.projects),
                                                                          ("owner", self.owners)) if names]
        return ", ".join(parts) if parts else "every job"


@dataclass(frozen=True, slots=True)
class Budget:
    name: str
    match: BudgetMatch = BudgetMatch()
    monthly_usd: float | None = None
    max_usd_per_hour: float | None = None
    alert_at: tuple[float, ...] = ()        # fractions of monthly_usd, ascending
    stop_at_cap: CapStop = CapStop.NONE


# -- the facts ------------------------------------------------------------------------------------------

def month_start(now: datetime) -> datetime:
    """The first instant of ``now``'s calendar month, UTC."""
    now = now.astimezone(UTC)
    return datetime(now.year, now.month, 1, tzinfo=UTC)


def next_month_start(now: datetime) -> datetime:
    start = month_start(now)
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


def month_label(now: datetime) -> str:
    """``2025-07``: the month thresholds are alerted once in."""
    return month_start(now).strftime("%Y-%m")


@dataclass(frozen=True, slots=True)
class JobFacts:
    job_id: int
    name: str
    project: str | None
    month_usd: float = 0.0      # spent this calendar month (UTC)
    burn_hr: float = 0.0        # $/h of its machines running now
    owner: str | None = None    # the orch owner whose engine launched its machines (None: none yet)


@dataclass(frozen=True, slots=True)
class ThresholdKey:
    budget: str
    threshold: float


@dataclass(frozen=True, slots=True)
class BudgetLedger:
    """What the budgets are checked against at ``now``: each job's spend this month and burn now, and the
    thresholds already alerted this month (the store's ``budget-threshold`` events)."""

    now: datetime
    jobs: tuple[JobFacts, ...] = ()
    alerted: frozenset[ThresholdKey] = frozenset()

    def spent(self, budget: Budget) -> float:
        return sum(j.month_usd for j in self.jobs if budget.match.covers(j.project, j.owner))

    def burn(self, budget: Budget) -> float:
        return sum(j.burn_hr for j in self.jobs if budget.match.covers(j.project, j.owner))

    def hours_left_in_month(self) -> float:
        return (next_month_start(self.now) - self.now).total_seconds() / 3600

    def with_launch(self, job_id: int, name: str, project: str | None, price_hr: float,
                    owner: str | None = None) -> BudgetLedger:
        """The ledger after a launch at ``price_hr`` by ``owner`` (several launches in one tick each count)."""
        jobs = list(self.jobs)
        for i, j in enumerate(jobs):
            if j.job_id == job_id:
                jobs[i] = replace(j, burn_hr=j.burn_hr + price_hr, owner=owner or j.owner)
                break
        else:
            jobs.append(JobFacts(job_id, name, project, 0.0, price_hr, owner))
        return replace(self, jobs=tuple(jobs))


def usd(value: float) -> str:
    """Dollars as budgets' messages write them: $1,234.50."""
    return f"${value:,.2f}"


# -- thresholds and the cap -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Crossing:
    """A budget's spend passed one of its alert thresholds this month, for the first time."""

    budget: str
    threshold: float
    spent_usd: float
    monthly_usd: float
    month: str

    @property
    def at_cap(self) -> bool:
        return self.spent_usd >= self.monthly_usd

    def message(self) -> str:
        text = (f"budget {self.budget}: {usd(self.spent_usd)} of {usd(self.monthly_usd)} spent in {self.month} "
                f"({self.spent_usd / self.monthly_usd:.0%}), past its {self.threshold:.0%} alert")
        return text + ("; at its cap: no more launches this month" if self.at_cap else "")

    def data(self) -> dict[str, object]:
        """The ``budget-threshold`` event's data (what ``alerted`` is read back from)."""
        return {"budget": self.budget, "threshold": self.threshold, "month": self.month,
                "spent_usd": round(self.spent_usd, 4), "monthly_usd": self.monthly_usd}


@dataclass(frozen=True, slots=True)
class Standing:
    """How close one budget is, now."""

    budget: Budget
    spent_usd: float
    burn_hr: float

    @property
    def fraction(self) -> float | None:
        return self.spent_usd / self.budget.monthly_usd if self.budget.monthly_usd else None

    @property
    def at_cap(self) -> bool:
        return self.budget.monthly_usd is not None and self.spent_usd >= self.budget.monthly_usd

    @property
    def over_ceiling(self) -> bool:
        return self.budget.max_usd_per_hour is not None and self.burn_hr > self.budget.max_usd_per_hour + 1e-9

    def to_json(self) -> dict[str, object]:
        b = self.budget
        return {"name": b.name, "match": sorted(b.match.projects) or None,
                "match_owners": sorted(b.match.owners) or None, "monthly_usd": b.monthly_usd,
                "spent_usd": round(self.spent_usd, 4), "fraction": None if self.fraction is None
                else round(self.fraction, 4), "max_usd_per_hour": b.max_usd_per_hour,
                "burn_usd_per_hour": round(self.burn_hr, 4), "at_cap": self.at_cap,
                "over_ceiling": self.over_ceiling, "alert_at": list(b.alert_at),
                "stop_at_cap": b.stop_at_cap.value,
                # the older key, kept for readers of this JSON: true when its spot machines end at the cap
                "stop_spot_at_cap": b.stop_at_cap is not CapStop.NONE}


@dataclass(frozen=True, slots=True)
class CapStopJob:
    """A job of budgets at their cap whose running machines end: which ones (the widest ``stop_at_cap`` of
    those budgets) and the budgets' names."""

    job_id: int
    stop: CapStop
    budgets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BudgetReview:
    standings: tuple[Standing, ...]
    crossings: tuple[Crossing, ...]          # thresholds to alert now (each once per month)
    cap_stops: tuple[CapStopJob, ...] = ()   # jobs whose running machines end (after a drain), by job id

    @property
    def capped(self) -> tuple[str, ...]:
        return tuple(s.budget.name for s in self.standings if s.at_cap)


def review(budgets: Sequence[Budget], ledger: BudgetLedger) -> BudgetReview:
    """Every budget's standing; the thresholds newly crossed; the jobs whose machines must stop (each job once,
    with the widest stop of the budgets at their cap that cover it)."""
    month = month_label(ledger.now)
    standings: list[Standing] = []
    crossings: list[Crossing] = []
    stops: dict[int, CapStopJob] = {}
    for budget in budgets:
        standing = Standing(budget, ledger.spent(budget), ledger.burn(budget))
        standings.append(standing)
        if budget.monthly_usd is None:
            continue
        for threshold in budget.alert_at:
            key = ThresholdKey(budget.name, threshold)
            if standing.spent_usd >= threshold * budget.monthly_usd - 1e-9 and key not in ledger.alerted:
                crossings.append(Crossing(budget.name, threshold, standing.spent_usd, budget.monthly_usd, month))
        if standing.at_cap and budget.stop_at_cap is not CapStop.NONE:
            for j in ledger.jobs:
                if budget.match.covers(j.project, j.owner):
                    stops[j.job_id] = _wider(stops.get(j.job_id), j.job_id, budget)
    return BudgetReview(tuple(standings), tuple(crossings), tuple(stops.values()))


def _wider(known: CapStopJob | None, job_id: int, budget: Budget) -> CapStopJob:
    """``known`` with ``budget``'s stop added: its name listed, its stop kept if wider."""
    if known is None:
        return CapStopJob(job_id, budget.stop_at_cap, (budget.name,))
    stop = budget.stop_at_cap if budget.stop_at_cap.width > known.stop.width else known.stop
    return CapStopJob(job_id, stop, (*known.budgets, budget.name))


def alerted_from(events: Sequence[Mapping[str, object]], month: str) -> frozenset[ThresholdKey]:
    """The thresholds already alerted in ``month``, from ``budget-threshold`` events' data."""
    out: set[ThresholdKey] = set()
    for data in events:
        budget, threshold = data.get("budget"), data.get("threshold")
        if data.get("month") == month and isinstance(budget, str) and isinstance(threshold, int | float):
            out.add(ThresholdKey(budget, round(float(threshold), 4)))
    return frozenset(out)
