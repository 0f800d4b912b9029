"""The planner: every eligible offer for a job, ranked by expected cost, with the flags a buyer checks.

Two small seams, so the planner can grow (a VRAM-fit planner, a deadline-aware spot policy):

* ``Ranking``: turns an eligible offer into a comparable expected cost. Today ``ExpectedCostRanking``
  is $/h x estimated hours (x nodes); a later one can price preemption risk or deadline slack.
* ``OfferSource``: where offers come from (the catalog, live provider APIs); ``gather_offers`` merges
  them, a live price replacing the catalog's for the same machine, place and market.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from orchestrator.advice import RAM_GB_PER_GPU, VCPU_PER_GPU, rule_of_thumb_flags
from providers.base import GpuRequest, Market, Offer
from providers.catalog.query import match_offers, region_matches
from providers.gpus import Interconnect, gpu_by_name

if TYPE_CHECKING:
    from orchestrator.fit.planning import FitCheck

#: Typical internet/inter-region egress list price; used only for the warning's rough estimate.
EGRESS_USD_PER_GB = 0.09


@dataclass(frozen=True, slots=True)
class DataSource:
    uri: str
    region: str | None = None
    size_gb: float | None = None


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """A job's resource constraints, as the planner needs them (built from a manifest)."""

    gpus: tuple[str, ...]
    count: int = 1
    nodes: int = 1
    markets: frozenset[Market] = frozenset(Market)
    providers_allow: tuple[str, ...] = ()
    providers_deny: tuple[str, ...] = ()
    regions_allow: tuple[str, ...] = ()
    regions_deny: tuple[str, ...] = ()
    max_price_hr: float | None = None
    min_vram_gb: float | None = None
    interconnect: Interconnect | None = None
    estimated_hours: float | None = None
    budget_usd: float | None = None
    data: tuple[DataSource, ...] = ()
    exclude_zones: frozenset[str] = frozenset()
    fit: FitCheck | None = None      # the job's model: offers it does not fit are rejected (orchestrator.fit)

    def gpu_request(self) -> GpuRequest:
        """The catalog query: everything but the deny lists, VRAM and budget (those become flags)."""
        return GpuRequest(
            gpus=self.gpus, count=self.count, nodes=self.nodes, markets=self.markets,
            providers=self.providers_allow, regions=self.regions_allow, max_price_hr=self.max_price_hr,
            interconnect=self.interconnect, exclude_zones=self.exclude_zones,
        )


@dataclass(frozen=True, slots=True)
class PlannedOffer:
    """An offer with its expected cost for the whole job and what a careful buyer should know."""

    offer: Offer
    nodes: int
    expected_cost_usd: float | None
    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def total_price_hr(self) -> float:
        return self.offer.price_hr * self.nodes


@dataclass(frozen=True, slots=True)
class Plan:
    """``eligible`` cheapest first; ``rejected`` offers that matched the GPU but break a hard constraint."""

    request: PlanRequest
    eligible: tuple[PlannedOffer, ...]
    rejected: tuple[PlannedOffer, ...] = field(default=())

    @property
    def chosen(self) -> PlannedOffer | None:
        return self.eligible[0] if self.eligible else None


class Ranking(Protocol):
    def expected_cost(self, offer: Offer, req: PlanRequest) -> float:
        """A comparable cost (USD) of running the whole job on this offer; lower is better."""
        ...


class ExpectedCostRanking:
    """$/h x nodes x estimated hours; with no estimate, one hour (so offers still order by $/h)."""

    def expected_cost(self, offer: Offer, req: PlanRequest) -> float:
        return offer.price_hr * req.nodes * (req.estimated_hours or 1.0)


class OfferSource(Protocol):
    def offers(self, req: GpuRequest) -> list[Offer]: ...


def gather_offers(req: GpuRequest, catalog: Iterable[Offer], live: Sequence[OfferSource] = ()) -> list[Offer]:
    """Catalog offers plus live ones; a live offer replaces the catalog row with the same key.

    A live source that fails is skipped: planning must not break because one API is down.
    """
    from providers.errors import ProviderError

    merged: dict[tuple[object, ...], Offer] = {o.key: o for o in match_offers(catalog, req)}
    for source in live:
        try:
            found = source.offers(req)
        except ProviderError:
            continue
        # A live source may answer more broadly than asked (interconnect, region): hold it to the request.
        for o in match_offers(found, req):
            key = o.key if o.key in merged else (*o.key, o.offer_id)
            merged[key] = o
    return list(merged.values())


def _flags(offer: Offer, req: PlanRequest, expected: float | None) -> tuple[list[str], list[str]]:
    flags = list(rule_of_thumb_flags(offer))
    notes: list[str] = []
    if any(f.endswith("vcpu-per-gpu") for f in flags):
        notes.append(f"{offer.vcpus_per_gpu:g} vCPU/GPU is outside {VCPU_PER_GPU[0]:g}-{VCPU_PER_GPU[1]:g}")
    if any(f.endswith("ram-per-gpu") for f in flags):
        notes.append(f"{offer.memory_gb_per_gpu:.0f} GB RAM/GPU is outside {RAM_GB_PER_GPU[0]:g}-"
                     f"{RAM_GB_PER_GPU[1]:g} GB")
    for src in req.data:
        if src.region and src.region != offer.region:
            flags.append("egress")
            if src.size_gb:
                notes.append(f"data {src.uri} is in {src.region}, offer in {offer.region}: egress ~"
                             f"${src.size_gb * EGRESS_USD_PER_GB:.2f} for {src.size_gb:g} GB")
            else:
                notes.append(f"data {src.uri} is in {src.region}, offer in {offer.region}: egress charges apply")
    if req.budget_usd is not None and expected is not None and expected > req.budget_usd:
        flags.append("over-budget")
        notes.append(f"estimate ${expected:.2f} exceeds the budget ${req.budget_usd:.2f}")
    if offer.market is Market.SPOT:
        notes.append("spot: can be preempted; orch resumes from the last committed checkpoint")
    return flags, notes


def _hard_rejection(offer: Offer, req: PlanRequest) -> str | None:
    if offer.provider in req.providers_deny:
        return "provider-denied"
    if req.regions_deny and region_matches(offer, req.regions_deny):
        return "region-denied"
    if req.min_vram_gb is not None and offer.vram_gb < req.min_vram_gb:
        return "vram-below-need"
    if req.fit is not None:
        return req.fit.rejection(offer.gpu, offer.gpu_count, req.nodes)
    return None


def plan(req: PlanRequest, offers: Iterable[Offer], ranking: Ranking | None = None) -> Plan:
    """Rank ``offers`` (already gathered for ``req.gpu_request()``) for the job described by ``req``."""
    ranking = ranking or ExpectedCostRanking()
    eligible: list[PlannedOffer] = []
    rejected: list[PlannedOffer] = []
    for offer in offers:
        expected = ranking.expected_cost(offer, req) if req.estimated_hours else None
        flags, notes = _flags(offer, req, expected)
        reason = _hard_rejection(offer, req)
        if reason:
            rejected.append(PlannedOffer(offer, req.nodes, expected, (reason, *flags), tuple(notes)))
        else:
            eligible.append(PlannedOffer(offer, req.nodes, expected, tuple(flags), tuple(notes)))
    key = ranking.expected_cost
    eligible.sort(key=lambda p: (key(p.offer, req), p.offer.provider, p.offer.instance_type, p.offer.region))
    return Plan(req, tuple(eligible), tuple(rejected))


def vram_need(gpus: Sequence[str]) -> float:
    """The smallest VRAM among acceptable models: a manifest's implied need when min_vram is unset."""
    return min(gpu_by_name(g).vram_gb for g in gpus)


def without_zone(req: PlanRequest, zone: str | None, region: str | None = None) -> PlanRequest:
    """The same request with a preempted place excluded (zone, or region where offers carry no zone)."""
    places = {p for p in (zone, region) if p}
    return replace(req, exclude_zones=req.exclude_zones | places)

