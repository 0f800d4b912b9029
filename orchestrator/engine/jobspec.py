"""A job as the engine needs it: planning constraints and policies, derived from its manifest."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from orchestrator.engine.idle_rule import IdlePolicy
from orchestrator.offers.planner import PlanRequest
from providers.base import Market

if TYPE_CHECKING:
    from orchestrator.fit.planning import FitCheck
    from orchestrator.manifest.schema import Manifest
    from providers.base import Offer


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str
    plan: PlanRequest
    idle: IdlePolicy = field(default_factory=IdlePolicy)
    max_relaunches: int = 10
    cooldown: timedelta = timedelta(minutes=30)
    budget_usd: float | None = None
    deadline: datetime | None = None
    #: The job's resources.disk_gb, rounded up; None: the provider's default (LaunchSpec.disk_size).
    disk_gb: int | None = None
    image: str | None = None
    max_price_hr: float | None = None
    #: The manifest's own liveness deadlines (None: the daemon's, ``EngineConfig.deadlines``).
    boot_timeout: timedelta | None = None
    heartbeat_timeout: timedelta | None = None
    unreachable_grace: timedelta | None = None


def jobspec_from_manifest(manifest: Manifest, applied_at: datetime, catalog: Iterable[Offer] | None = None) -> JobSpec:
    """Map a validated manifest onto what the engine and the planner need.

    A ``model:`` block makes the plan check every offer against the memory model; without ``resources.gpu``
    the GPUs and count are chosen from ``catalog`` (default: the loaded catalog), see orchestrator.fit.planning.
    """
    from orchestrator.engine.idle_rule import IdleAction
    from orchestrator.manifest.schema import MarketChoice
    from orchestrator.offers.planner import DataSource
    from providers.fabric import FabricWant
    from providers.gpus import Interconnect

    r = manifest.resources
    markets = {
        MarketChoice.SPOT: frozenset({Market.SPOT}),
        MarketChoice.ON_DEMAND: frozenset({Market.ON_DEMAND}),
        MarketChoice.AUTO: frozenset(Market),
    }[manifest.market]
    p = manifest.policies
    gpus, count, fit = _model_fit(manifest, markets, catalog)
    plan = PlanRequest(
        gpus=gpus, count=count, nodes=r.nodes, markets=markets, fit=fit,
        providers_allow=tuple(manifest.providers.allow), providers_deny=tuple(manifest.providers.deny),
        regions_allow=tuple(manifest.regions.allow), regions_deny=tuple(manifest.regions.deny),
        max_price_hr=manifest.max_price_hr, min_vram_gb=r.min_vram_gb,
        interconnect=Interconnect(r.interconnect) if r.interconnect else None, fabric=FabricWant(r.fabric),
        estimated_hours=p.estimated_hours, budget_usd=p.budget_usd,
        data=tuple(DataSource(d.source, d.region, d.size_gb) for d in manifest.data),
        vcpus_per_gpu=r.vcpus_per_gpu, ram_gb_per_gpu=r.ram_gb_per_gpu, disk_gb=r.disk_gb,
        checkpointed=manifest.checkpoint is not None,
    )
    return JobSpec(
        name=manifest.name, plan=plan,
        idle=IdlePolicy(p.idle.min_gpu_util_pct, p.idle.window, IdleAction(p.idle.action.value)),
        max_relaunches=p.max_relaunches, cooldown=p.preempted_zone_cooldown, budget_usd=p.budget_usd,
        deadline=p.deadline_at(applied_at), disk_gb=math.ceil(r.disk_gb) if r.disk_gb else None, image=manifest.image,
        max_price_hr=manifest.max_price_hr / r.nodes if manifest.max_price_hr else None,
        boot_timeout=p.boot_timeout, heartbeat_timeout=p.heartbeat_timeout, unreachable_grace=p.unreachable_grace,
    )


def _model_fit(manifest: Manifest, markets: frozenset[Market],
               catalog: Iterable[Offer] | None) -> tuple[tuple[str, ...], int, FitCheck | None]:
    r = manifest.resources
    if manifest.model is None:
        return tuple(r.gpu), r.count, None
    from orchestrator.fit.planning import FitCheck, allowed_offers, resolve_gpus

    query = manifest.model.fit_query(markets=markets)
    if r.gpu:
        return tuple(r.gpu), r.count, FitCheck(query)
    if catalog is None:
        from providers.catalog import load_catalog

        catalog = load_catalog().offers
    offers = allowed_offers(catalog, manifest.providers.allow, manifest.providers.deny,
                            tuple(manifest.regions.allow), tuple(manifest.regions.deny))
    gpus, count = resolve_gpus(query, offers, r.nodes, r.count if r.count != 1 else None)
    return gpus, count, FitCheck(query)
