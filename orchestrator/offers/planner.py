"""The planner: every eligible offer for a job, ranked by expected cost, with the flags a buyer checks.

Two small seams, so the planner can grow (a VRAM-fit planner, a deadline-aware spot policy):

* ``Ranking``: turns an eligible offer into a comparable expected cost. Today ``ExpectedCostRanking``
  is $/h x estimated hours (x nodes); a later one can price preemption risk or deadline slack.
* where offers come from (the catalog, your own machines, live provider APIs) is
  orchestrator.offers.sources: the one set of sources every caller plans from.

Offers are gathered broadly (GPU, count, market, allowed providers, places not cooling down); every other
constraint of the manifest is checked here, so that an offer it excludes says which constraint did
(``Exclusion``), and ``orch plan`` can show the near misses.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.offers.advice import RAM_GB_PER_GPU, VCPU_PER_GPU, rule_of_thumb_flags
from providers.base import Availability, GpuRequest, Market, Offer
from providers.catalog.query import Site, own_machines_free, own_machines_short, region_matches
from providers.fabric import FabricWant, fabric_note, fabric_shortfall
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
    fabric: FabricWant = FabricWant.ANY   # resources.fabric
    estimated_hours: float | None = None
    budget_usd: float | None = None
    data: tuple[DataSource, ...] = ()
    exclude_zones: frozenset[str] = frozenset()
    vcpus_per_gpu: float | None = None
    ram_gb_per_gpu: float | None = None
    disk_gb: float | None = None
    #: The job has a checkpoint section: a preempted spot run resumes from its last committed checkpoint.
    checkpointed: bool = False
    fit: FitCheck | None = None      # the job's model: offers it does not fit are rejected (orchestrator.fit)

    def gpu_request(self) -> GpuRequest:
        """The offer query: what an offer must be to be considered at all (the GPUs, count, market, allowed
        providers, places not cooling down). ``plan`` checks every other constraint, and says which one
        excluded an offer."""
        return GpuRequest(
            gpus=self.gpus, count=self.count, nodes=self.nodes, markets=self.markets,
            providers=self.providers_allow, exclude_zones=self.exclude_zones,
            disk_gb=self.disk_gb,     # a cloud that bills disk by the hour (Vast) prices its offers with it
        )


class Constraint(StrEnum):
    """A job constraint an offer of the right GPUs can break (the first flags of a rejected offer)."""

    PROVIDER_DENIED = "provider-denied"
    REGION_NOT_ALLOWED = "region-not-allowed"
    REGION_DENIED = "region-denied"
    VRAM = "vram-below-need"
    INTERCONNECT = "interconnect-mismatch"
    FABRIC = "fabric-mismatch"                  # multi-node: not the node-to-node fabric resources.fabric asks
    SINGLE_NODE = "single-node-provider"        # multi-node: orch launches single machines only there
    OWN_MACHINES = "too-few-machines"           # multi-node: fewer of your machines of this kind free than nodes
    VCPUS = "vcpus-below-need"
    RAM = "ram-below-need"
    DISK = "disk-below-need"
    MAX_PRICE = "over-max-price"
    NOT_AVAILABLE = "not-available"
    MODEL_FIT = "model-does-not-fit"            # the job's model: needs more GPU memory (orchestrator.fit)
    PRECISION = "precision-unsupported"         # the job's model: precision the GPU cannot compute


@dataclass(frozen=True, slots=True)
class Exclusion:
    """Why an offer is not eligible: the constraint and, in words, the offer's value against the job's."""

    constraint: Constraint
    detail: str                     # e.g. "8 vCPU/GPU < 100 asked"

    def to_json(self) -> dict[str, str]:
        return {"constraint": self.constraint.value, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class PlannedOffer:
    """An offer with its expected cost for the whole job and what a careful buyer should know."""

    offer: Offer
    nodes: int
    expected_cost_usd: float | None
    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    excluded: tuple[Exclusion, ...] = ()    # empty for an eligible offer

    @property
    def total_price_hr(self) -> float:
        return self.offer.price_hr * self.nodes

    def to_json(self) -> dict[str, Any]:
        o = self.offer
        return {
            "provider": o.provider, "instance_type": o.instance_type, "region": o.region, "zone": o.zone,
            "gpu": o.gpu, "gpu_count": o.gpu_count, "vram_gb": o.vram_gb, "market": o.market.value,
            "nodes": self.nodes, "price_hr": round(o.price_hr, 4), "total_price_hr": round(self.total_price_hr, 4),
            "estimated_total_usd": round(self.expected_cost_usd, 2) if self.expected_cost_usd is not None else None,
            "source": str(o.source), "flags": list(self.flags), "notes": list(self.notes),
            "excluded": [e.to_json() for e in self.excluded],
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """``eligible`` cheapest first; ``rejected`` offers that matched the GPU but break a hard constraint."""

    request: PlanRequest
    eligible: tuple[PlannedOffer, ...]
    rejected: tuple[PlannedOffer, ...] = field(default=())

    @property
    def chosen(self) -> PlannedOffer | None:
        return self.eligible[0] if self.eligible else None

    def near_misses(self, limit: int | None = None) -> tuple[PlannedOffer, ...]:
        """Rejected offers that break the fewest constraints, cheapest first: what a small change would get."""
        ranked = sorted(self.rejected, key=lambda p: (len(p.excluded), p.total_price_hr, p.offer.provider,
                                                      p.offer.instance_type, p.offer.region))
        return tuple(ranked[:limit] if limit is not None else ranked)

    def exclusion_counts(self) -> dict[Constraint, int]:
        """How many rejected offers each constraint excluded (an offer may count under several)."""
        counts: dict[Constraint, int] = {}
        for p in self.rejected:
            for e in p.excluded:
                counts[e.constraint] = counts.get(e.constraint, 0) + 1
        return counts


class Ranking(Protocol):
    def expected_cost(self, offer: Offer, req: PlanRequest) -> float:
        """A comparable cost (USD) of running the whole job on this offer; lower is better."""
        ...


class ExpectedCostRanking:
    """$/h x nodes x estimated hours; with no estimate, one hour (so offers still order by $/h)."""

    def expected_cost(self, offer: Offer, req: PlanRequest) -> float:
        return offer.price_hr * req.nodes * (req.estimated_hours or 1.0)


def _flags(offer: Offer, req: PlanRequest, expected: float | None) -> tuple[list[str], list[str]]:
    flags = list(rule_of_thumb_flags(offer))
    notes: list[str] = []
    if "low-vcpu-per-gpu" in flags:
        notes.append(f"{offer.vcpus_per_gpu:g} vCPU/GPU is below the {VCPU_PER_GPU[0]:g}-{VCPU_PER_GPU[1]:g} minimum")
    if "low-ram-per-gpu" in flags:
        notes.append(f"{offer.memory_gb_per_gpu:.0f} GB RAM/GPU is below the {RAM_GB_PER_GPU[0]:g}-"
                     f"{RAM_GB_PER_GPU[1]:g} GB minimum")
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
    fabric = fabric_note(offer.provider, offer.instance_type, req.nodes)
    if fabric:
        notes.append(fabric)
    if offer.market is Market.SPOT:
        if req.checkpointed:
            notes.append("spot: can be preempted; orch resumes from the last committed checkpoint")
        else:
            notes.append("spot: can be preempted, and with no checkpoint section a preemption restarts the job "
                         "from scratch (add checkpoint: to resume from the last committed one)")
    return flags, notes


def _globs(patterns: tuple[str, ...]) -> str:
    """The user's region globs for a message: a long one may be a pasted secret, and is not echoed."""
    from orchestrator.redaction import brief

    return ", ".join(brief(p) for p in patterns)


def _exclusions(offer: Offer, req: PlanRequest, own_free: dict[Site, int]) -> list[Exclusion]:
    """Every constraint of ``req`` the offer breaks, each with its reason in words (``own_free``: your machines
    free per site, ``own_machines_free``)."""
    out: list[Exclusion] = []

    def no(constraint: Constraint, detail: str) -> None:
        out.append(Exclusion(constraint, detail))

    from providers.registry import launches_multi_node

    place = offer.zone or offer.region
    if offer.provider in req.providers_deny:
        no(Constraint.PROVIDER_DENIED, f"provider {offer.provider} is denied")
    if req.nodes > 1 and not launches_multi_node(offer.provider):
        no(Constraint.SINGLE_NODE, f"orch launches single machines on {offer.provider}, not {req.nodes} nodes")
    if (free := own_machines_short(offer, req.nodes, own_free)) is not None:
        no(Constraint.OWN_MACHINES, f"{free} of your {offer.gpu_count}x{offer.gpu} machines free in {offer.region}, "
           f"{req.nodes} nodes asked")
    if req.regions_allow and not region_matches(offer, req.regions_allow):
        no(Constraint.REGION_NOT_ALLOWED, f"{place} is not in regions.allow ({_globs(req.regions_allow)})")
    if req.regions_deny and region_matches(offer, req.regions_deny):
        no(Constraint.REGION_DENIED, f"{place} is in regions.deny ({_globs(req.regions_deny)})")
    if req.min_vram_gb is not None and offer.vram_gb < req.min_vram_gb:
        no(Constraint.VRAM, f"{offer.vram_gb:g} GB VRAM < {req.min_vram_gb:g} asked")
    if req.interconnect is not None and offer.interconnect is not req.interconnect:
        no(Constraint.INTERCONNECT, f"{offer.interconnect.value}, {req.interconnect.value} asked")
    if (short := fabric_shortfall(offer.provider, offer.instance_type, req.nodes, req.fabric)) is not None:
        no(Constraint.FABRIC, short)
    if req.vcpus_per_gpu is not None and offer.vcpus_per_gpu and offer.vcpus_per_gpu < req.vcpus_per_gpu:
        no(Constraint.VCPUS, f"{offer.vcpus_per_gpu:g} vCPU/GPU < {req.vcpus_per_gpu:g} asked")
    if req.ram_gb_per_gpu is not None and offer.memory_gb_per_gpu and offer.memory_gb_per_gpu < req.ram_gb_per_gpu:
        no(Constraint.RAM, f"{offer.memory_gb_per_gpu:g} GB RAM/GPU < {req.ram_gb_per_gpu:g} asked")
    if req.disk_gb is not None and offer.max_disk_gb is not None and offer.max_disk_gb < req.disk_gb:
        no(Constraint.DISK, f"disk {offer.max_disk_gb:g} GB < {req.disk_gb:g} asked")
    total = offer.price_hr * req.nodes
    if req.max_price_hr is not None and total > req.max_price_hr:
        nodes = f" for {req.nodes} nodes" if req.nodes > 1 else ""
        no(Constraint.MAX_PRICE, f"${total:.2f}/h{nodes} > max_price_hr ${req.max_price_hr:.2f}")
    if req.fit is not None:
        reason = req.fit.rejection(offer.gpu, offer.gpu_count, req.nodes)
        if reason is not None:
            no(Constraint(reason), f"the model does not fit {req.nodes * offer.gpu_count}x {offer.gpu}"
               if reason == Constraint.MODEL_FIT else f"{offer.gpu} cannot compute in the model's precision")
    if offer.availability is Availability.NOT_AVAILABLE:
        no(Constraint.NOT_AVAILABLE, "not available now (no capacity, or your machine is reserved)")
    return out


def _unknowns(offer: Offer, req: PlanRequest) -> list[str]:
    """Notes for constraints this offer cannot be checked against (what orch does not know about it)."""
    from providers.registry import has_fixed_disk

    notes: list[str] = []
    if req.vcpus_per_gpu is not None and not offer.vcpus:
        notes.append(f"vCPU count unknown: {req.vcpus_per_gpu:g} vCPU/GPU asked is not checked")
    if req.ram_gb_per_gpu is not None and not offer.memory_gb:
        notes.append(f"RAM unknown: {req.ram_gb_per_gpu:g} GB/GPU asked is not checked")
    if req.disk_gb is not None and offer.max_disk_gb is None and has_fixed_disk(offer.provider):
        notes.append(f"{offer.provider} machines come with their own disk, of a size not known here: "
                     f"{req.disk_gb:g} GB asked is not checked before launch")
    return notes


def plan(req: PlanRequest, offers: Iterable[Offer], ranking: Ranking | None = None) -> Plan:
    """Rank ``offers`` (gathered for ``req.gpu_request()``) for the job described by ``req``: those that
    keep every constraint are eligible, cheapest first; the others are rejected with their exclusions."""
    ranking = ranking or ExpectedCostRanking()
    eligible: list[PlannedOffer] = []
    rejected: list[PlannedOffer] = []
    offers = list(offers)
    own_free = own_machines_free(offers)
    for offer in offers:
        expected = ranking.expected_cost(offer, req) if req.estimated_hours else None
        flags, notes = _flags(offer, req, expected)
        excluded = _exclusions(offer, req, own_free)
        if excluded:
            reasons = tuple(e.constraint.value for e in excluded)
            rejected.append(PlannedOffer(offer, req.nodes, expected, (*reasons, *flags), tuple(notes),
                                         tuple(excluded)))
        else:
            notes += _unknowns(offer, req)
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

