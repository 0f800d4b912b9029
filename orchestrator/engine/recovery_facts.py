"""The facts a recovery policy decides on (``RecoveryContext``), gathered from the store and the catalog."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ports import AttemptRecord, FleetSpotRun, JobRecord
from orchestrator.engine.recovery_policy import Preemption, RecoveryContext, SpotRun
from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.offers.planner import plan
from orchestrator.offers.sources import offer_sources
from providers.base import Market

#: A node ended past a liveness deadline (orchestrator/engine/liveness.py) cools its place like a preemption.
COOLING_CAUSES = frozenset({EndCause.BOOT_TIMEOUT, EndCause.SILENT, EndCause.UNREACHABLE})

#: How far back the fleet's spot history reaches: machines up at some time in the last week. Long enough to
#: hold many lifetimes and outages of a busy place; short enough that a week-old crunch does not count.
FLEET_HISTORY = timedelta(days=7)


#: A place whose nodes keep failing liveness is kept out ever longer: the cool-down doubles per earlier such
#: end there, up to this many times the job's own (a backoff per place: a zone whose machines never boot is
#: tried again ever more rarely, never in a loop of paid machines).
MAX_BACKOFF = 8


def preempted_places(attempts: Sequence[AttemptRecord], now: datetime, cooldown: timedelta) -> frozenset[str]:
    """Zones (else regions) where these attempts were preempted within ``cooldown`` of ``now``, or ended past a
    liveness deadline within their backed-off cool-down (``cooled_places``)."""
    return frozenset(a.offer.zone or a.offer.region for a in attempts
                     if a.state is AttemptState.PREEMPTED and a.end_cause not in COOLING_CAUSES
                     and now - (a.ended_at or now) < cooldown) | cooled_places(attempts, now, cooldown)


def cooled_places(attempts: Sequence[AttemptRecord], now: datetime, cooldown: timedelta) -> frozenset[str]:
    """Zones (else regions) of the nodes ended past a liveness deadline, each kept out for ``cooldown`` after
    its last such end, doubled per earlier one there (up to ``MAX_BACKOFF`` times; the policy's own
    exclusions cover preemptions)."""
    ends: dict[str, list[datetime]] = {}
    for a in attempts:
        if a.end_cause in COOLING_CAUSES:
            ends.setdefault(a.offer.zone or a.offer.region, []).append(a.ended_at or now)
    return frozenset(place for place, at in ends.items()
                     if now - max(at) < cooldown * min(2 ** (len(at) - 1), MAX_BACKOFF))


@dataclass(frozen=True, slots=True)
class SpotFacts:
    """A job's spot facts from the catalog: the places (zone, else region) of its eligible spot offers, the
    cheapest spot over the cheapest on-demand $/h (overall and per place), the GPU models of those spot
    offers, and the cheapest eligible on-demand $/h for the whole job (all its nodes)."""

    places: tuple[str, ...]
    ratio: float | None
    place_ratios: tuple[float, ...]
    gpus: frozenset[str]
    on_demand_hr: float | None


@dataclass(frozen=True, slots=True)
class _Fleet:
    """The fleet's spot history as read at ``now`` (one tick), by (GPU model, place), and the tuples handed
    out per (GPU models, places)."""

    now: datetime
    index: dict[tuple[str, str], list[FleetSpotRun]]
    shared: dict[tuple[frozenset[str], tuple[str, ...]], tuple[SpotRun, ...]] = field(default_factory=dict)


class RecoveryFacts:
    """Builds a job's RecoveryContext. Caches each job's spot facts until the catalog changes, and the
    fleet's spot history for one tick (read once, for every job the policy is asked about in that tick)."""

    def __init__(self) -> None:
        self._spot: dict[int, SpotFacts] = {}
        self._fleet: _Fleet | None = None

    def begin_tick(self) -> None:
        """A new tick: the fleet's spot history is read again at its first use (also when the clock has not
        moved since the last tick, as a test's may not)."""
        self._fleet = None

    def forget_catalog(self) -> None:
        """The engine's catalog was swapped (a scheduled refresh): the spot facts are read again."""
        self._spot.clear()

    def context(self, deps: EngineDeps, job: JobRecord, now: datetime, *, running: AttemptRecord | None = None,
                noticed: bool = False) -> RecoveryContext:
        spec = job.spec
        attempts = deps.store.attempts_for_job(job.id)
        preemptions = [Preemption(a.ended_at or now, a.offer.provider, a.offer.zone, a.offer.region)
                       for a in attempts if a.state is AttemptState.PREEMPTED]
        running_h = sum(((a.ended_at or now) - a.started_at).total_seconds() / 3600
                        for a in attempts if a.started_at is not None and a.node_rank == 0)
        estimate = spec.plan.estimated_hours
        facts = self._spot_facts(deps, job)
        current = (running.offer.zone or running.offer.region) if running is not None else None
        ctx = RecoveryContext(
            now=now, relaunch_count=job.relaunch_count, max_relaunches=spec.max_relaunches,
            markets=spec.plan.markets, preemptions=preemptions, cooldown=spec.cooldown, spent_usd=job.spent_usd,
            budget_usd=spec.budget_usd, deadline=spec.deadline,
            remaining_hours=None if estimate is None else max(estimate - running_h, 0.0),
            estimated_hours=estimate, started_at=job.created_at, running_hours=running_h,
            on_spot=True if running is not None else None, current_place=current,
            current_age_hours=((now - running.started_at).total_seconds() / 3600
                               if running is not None and running.started_at is not None else 0.0),
            spot_places=facts.places, spot_price_ratio=facts.ratio, spot_place_ratios=facts.place_ratios,
            spot_runs=spot_runs(attempts), on_demand_hr=facts.on_demand_hr,
            fleet_runs=self._fleet_runs(deps, now, facts, current),
        )
        if noticed:
            ctx = replace(ctx, noticed=True, notice_window_hours=deps.config.notice_drain.total_seconds() / 3600)
        return ctx

    def _fleet_runs(self, deps: EngineDeps, now: datetime, facts: SpotFacts,
                    current: str | None) -> tuple[SpotRun, ...]:
        """The fleet's spot machines (every job's, this one's too) in the job's spot places (and where it runs)
        on the GPU models of its spot offers, or on an unnamed one: one tuple per tick for every job with the
        same places and models (the policy builds their history once). Only for a policy that reads history
        (``uses_history``).

        Same GPU model only: spot capacity is pooled per instance type, so a zone's A100 spot running dry
        says little about its H100 spot; a machine whose offer named no GPU model cannot be told apart and
        counts for all."""
        if not getattr(deps.hooks.recovery, "uses_history", False):
            return ()
        if self._fleet is None or self._fleet.now != now:
            self._fleet = _Fleet(now, _by_gpu_and_place(deps.store.spot_history(now - FLEET_HISTORY)))
        places = facts.places if current is None or current in facts.places else (*facts.places, current)
        key = (facts.gpus, places)
        found = self._fleet.shared.get(key)
        if found is None:
            runs = [f.run for gpu in (*sorted(facts.gpus), "") for place in places
                    for f in self._fleet.index.get((gpu, place), ())]
            found = self._fleet.shared[key] = tuple(sorted(runs, key=lambda r: r.started_at))
        return found

    def _spot_facts(self, deps: EngineDeps, job: JobRecord) -> SpotFacts:
        found = self._spot.get(job.id)
        if found is None:
            req = replace(job.spec.plan, markets=frozenset(Market))
            gathered = offer_sources(deps.catalog).offers(req.gpu_request())   # the catalog's facts only
            eligible = [c for c in plan(req, gathered).eligible if c.offer.provider in deps.providers]
            spot = [c.offer for c in eligible if c.offer.market is Market.SPOT]
            od_offers = [c for c in eligible if c.offer.market is Market.ON_DEMAND]
            od = [c.offer.price_hr for c in od_offers]
            places = tuple(dict.fromkeys(o.zone or o.region for o in spot))
            ratio = min(o.price_hr for o in spot) / min(od) if spot and od and min(od) > 0 else None
            per_place = tuple(min(o.price_hr for o in spot if (o.zone or o.region) == p) / min(od)
                              for p in places) if spot and od and min(od) > 0 else ()
            found = self._spot[job.id] = SpotFacts(
                places, ratio, per_place, frozenset(o.gpu for o in spot if o.gpu),
                min((c.total_price_hr for c in od_offers), default=None))
        return found


def _by_gpu_and_place(runs: Iterable[FleetSpotRun]) -> dict[tuple[str, str], list[FleetSpotRun]]:
    index: dict[tuple[str, str], list[FleetSpotRun]] = {}
    for f in runs:
        index.setdefault((f.gpu, f.run.place), []).append(f)
    return index


def spot_runs(attempts: Sequence[AttemptRecord]) -> tuple[SpotRun, ...]:
    """The job's spot machines (node 0 of each start) as SpotRuns, oldest first: what its policy forecasts
    each place's availability from. A machine that never started is no evidence either way."""
    runs = [SpotRun(a.offer.zone or a.offer.region, a.started_at, a.ended_at,
                    preempted=a.state is AttemptState.PREEMPTED,
                    noticed=a.end_cause is EndCause.NOTICED)
            for a in attempts
            if a.offer.market is Market.SPOT and a.node_rank == 0 and a.started_at is not None]
    return tuple(sorted(runs, key=lambda r: r.started_at))
