"""The facts a recovery policy decides on (``RecoveryContext``), gathered from the store and the catalog."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ports import AttemptRecord, AttemptState, EndCause, JobRecord
from orchestrator.offer_sources import offer_sources
from orchestrator.planner import plan
from orchestrator.recovery import Preemption, RecoveryContext, SpotRun
from providers.base import Market

#: A node ended past a liveness deadline (orchestrator/engine/liveness.py) cools its place like a preemption.
COOLING_CAUSES = frozenset({EndCause.BOOT_TIMEOUT, EndCause.SILENT, EndCause.UNREACHABLE})


def preempted_places(attempts: Sequence[AttemptRecord], now: datetime, cooldown: timedelta) -> frozenset[str]:
    """Zones (else regions) where these attempts were preempted, or ended past a liveness deadline, within
    ``cooldown`` of ``now``."""
    return frozenset(a.offer.zone or a.offer.region for a in attempts
                     if (a.state is AttemptState.PREEMPTED or a.end_cause in COOLING_CAUSES)
                     and now - (a.ended_at or now) < cooldown)


def cooled_places(attempts: Sequence[AttemptRecord], now: datetime, cooldown: timedelta) -> frozenset[str]:
    """Zones (else regions) of the nodes ended past a liveness deadline within ``cooldown`` of ``now`` (the
    policy's own exclusions cover preemptions)."""
    return frozenset(a.offer.zone or a.offer.region for a in attempts
                     if a.end_cause in COOLING_CAUSES and now - (a.ended_at or now) < cooldown)


class RecoveryFacts:
    """Builds a job's RecoveryContext. Caches each job's spot facts until the catalog changes: the places of
    its eligible spot offers and the cheapest spot over cheapest on-demand $/h."""

    def __init__(self) -> None:
        self._spot: dict[int, tuple[tuple[str, ...], float | None]] = {}

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
        places, ratio, place_ratios = self._spot_facts(deps, job)
        ctx = RecoveryContext(
            now=now, relaunch_count=job.relaunch_count, max_relaunches=spec.max_relaunches,
            markets=spec.plan.markets, preemptions=preemptions, cooldown=spec.cooldown, spent_usd=job.spent_usd,
            budget_usd=spec.budget_usd, deadline=spec.deadline,
            remaining_hours=None if estimate is None else max(estimate - running_h, 0.0),
            estimated_hours=estimate, started_at=job.created_at, running_hours=running_h,
            on_spot=True if running is not None else None,
            current_place=(running.offer.zone or running.offer.region) if running is not None else None,
            current_age_hours=((now - running.started_at).total_seconds() / 3600
                               if running is not None and running.started_at is not None else 0.0),
            spot_places=places, spot_price_ratio=ratio, spot_place_ratios=place_ratios,
            spot_runs=spot_runs(attempts),
        )
        if noticed:
            ctx = replace(ctx, noticed=True, notice_window_hours=deps.config.notice_drain.total_seconds() / 3600)
        return ctx

    def _spot_facts(self, deps: EngineDeps, job: JobRecord
                    ) -> tuple[tuple[str, ...], float | None, tuple[float, ...]]:
        found = self._spot.get(job.id)
        if found is None:
            req = replace(job.spec.plan, markets=frozenset(Market))
            gathered = offer_sources(deps.catalog).offers(req.gpu_request())   # the catalog's facts only
            offers = [c.offer for c in plan(req, gathered).eligible if c.offer.provider in deps.providers]
            spot = [o for o in offers if o.market is Market.SPOT]
            od = [o.price_hr for o in offers if o.market is Market.ON_DEMAND]
            places = tuple(dict.fromkeys(o.zone or o.region for o in spot))
            ratio = min(o.price_hr for o in spot) / min(od) if spot and od and min(od) > 0 else None
            per_place = tuple(min(o.price_hr for o in spot if (o.zone or o.region) == p) / min(od)
                              for p in places) if spot and od and min(od) > 0 else ()
            found = self._spot[job.id] = (places, ratio, per_place)
        return found


def spot_runs(attempts: Sequence[AttemptRecord]) -> tuple[SpotRun, ...]:
    """The job's spot machines (node 0 of each start) as SpotRuns, oldest first: what its policy forecasts
    each place's availability from. A machine that never started is no evidence either way."""
    runs = [SpotRun(a.offer.zone or a.offer.region, a.started_at, a.ended_at,
                    preempted=a.state is AttemptState.PREEMPTED,
                    noticed=a.end_cause is EndCause.NOTICED)
            for a in attempts
            if a.offer.market is Market.SPOT and a.node_rank == 0 and a.started_at is not None]
    return tuple(sorted(runs, key=lambda r: r.started_at))
