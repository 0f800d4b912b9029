"""Which GPUs, how many, and the cheapest offer: the memory model applied to every GPU in the registry.

For each GPU model the search walks machine shapes from small to large (1, 2, 4, 8 GPUs in one machine,
then 2, 3, ... machines of 8, up to ``max_nodes``; the fewest machines that fit are found by bisection, see
``fewest_nodes``) and takes the first one on which the job fits with headroom and that some
offer in the catalog rents; with ``sharding`` left to orch it tries, on each shape, plain data parallelism,
then ZeRO-2, then ZeRO-3 (least communication first). Pure functions over values: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from orchestrator.fit.memory import (
    DEFAULT_HEADROOM,
    GB,
    MemoryEstimate,
    Method,
    Offload,
    Precision,
    Sharding,
    TrainingSetup,
    estimate,
    usable_bytes,
)
from orchestrator.fit.shapes import MAX_NODES
from providers.base import Interconnect, Market, Offer
from providers.gpus import GPU_MODELS, GpuModel, gpu_by_name

MAX_GPUS_PER_NODE = 8


class LinkAdvice(StrEnum):
    SINGLE = "-"               # one GPU: nothing to link
    PCIE_OK = "pcie ok"        # data parallel of a model that fits one GPU: gradients all-reduced once a step
    NVLINK = "nvlink"          # sharded across more than 2 GPUs: weights gathered every layer


@dataclass(frozen=True, slots=True)
class FitQuery:
    """A training setup and how to search. ``auto_sharding``: orch picks the sharding per shape (the setup's
    ``sharding`` is then ignored); ``gpus`` limits the search to these canonical names (empty: all).
    ``auto_precision``: the precision was not given, so it is chosen per GPU: the setup's (bf16) where the GPU
    computes in it, else fp16 (with a note), as the usual recipes do on pre-Ampere GPUs (QLoRA on a T4)."""

    setup: TrainingSetup
    auto_sharding: bool = True
    headroom: float = DEFAULT_HEADROOM
    max_nodes: int = 8
    gpus: tuple[str, ...] = ()
    markets: frozenset[Market] = frozenset(Market)
    hours: float | None = None
    auto_precision: bool = False

    def for_gpu(self, gpu: GpuModel) -> tuple[FitQuery, str | None]:
        """The query as run on ``gpu`` (its precision chosen where it was not given) and the note saying so."""
        if self.auto_precision and self.setup.precision is Precision.BF16 and not gpu.bf16:
            note = f"fp16 on {gpu.name}: it has no bf16 ({gpu.architecture})"
            return replace(self, setup=replace(self.setup, precision=Precision.FP16)), note
        return self, None

    def strategies(self, total_gpus: int) -> tuple[Sharding, ...]:
        if not self.auto_sharding:
            return (self.setup.sharding,)
        order = (Sharding.DDP, Sharding.ZERO2, Sharding.ZERO3) if total_gpus > 1 else (Sharding.DDP, Sharding.ZERO3)
        if self.setup.offload is Offload.OPTIMIZER:
            order = tuple(z for z in order if z is not Sharding.DDP)
        elif self.setup.offload is Offload.PARAMS:
            order = (Sharding.ZERO3,)
        return order


@dataclass(frozen=True, slots=True)
class FitOption:
    """One GPU model's answer: the shape, the sharding, the per-GPU estimate, and the cheapest offer."""

    gpu: GpuModel
    count: int
    nodes: int
    sharding: Sharding
    estimate: MemoryEstimate
    fits: bool
    link: LinkAdvice
    offer: Offer | None
    hours: float | None
    headroom: float
    reason: str = ""
    notes: tuple[str, ...] = ()

    @property
    def total_gpus(self) -> int:
        return self.count * self.nodes

    @property
    def per_gpu_gb(self) -> float:
        return self.estimate.total / GB

    @property
    def usable_gb(self) -> float:
        return usable_bytes(self.gpu.vram_gb, self.headroom) / GB

    @property
    def price_hr(self) -> float | None:
        return self.offer.price_hr * self.nodes if self.offer else None

    @property
    def cost_usd(self) -> float | None:
        return self.price_hr * self.hours if self.price_hr is not None and self.hours else None

    def shape_text(self) -> str:
        return f"{self.count}x {self.gpu.name}" + (f" x{self.nodes} nodes" if self.nodes > 1 else "")

    def to_json(self) -> dict[str, object]:
        o = self.offer
        return {
            "gpu": self.gpu.name, "count": self.count, "nodes": self.nodes, "total_gpus": self.total_gpus,
            "per_gpu_gb": round(self.per_gpu_gb, 2), "usable_gb": round(self.usable_gb, 2),
            "vram_gb": self.gpu.vram_gb, "fits": self.fits, "sharding": self.sharding.value,
            "interconnect": self.link.value, "reason": self.reason or None, "notes": list(self.notes),
            "breakdown": self.estimate.to_json(),
            "offer": None if o is None else {
                "provider": o.provider, "instance_type": o.instance_type, "region": o.region, "zone": o.zone,
                "market": o.market.value, "interconnect": o.interconnect.value, "price_hr": round(o.price_hr, 4),
                "source": o.source.value},
            "price_hr": round(self.price_hr, 4) if self.price_hr is not None else None,
            "estimated_hours": self.hours,
            "estimated_cost_usd": round(self.cost_usd, 2) if self.cost_usd is not None else None,
        }


def precision_problem(gpu: GpuModel, precision: Precision, *, in_manifest: bool = False) -> str | None:
    """Why ``gpu`` cannot compute in ``precision`` (the registry's bf16/fp8 facts), or None; the fix is said as
    ``orch fit``'s flag, or (``in_manifest``) as the manifest's field: ``orch plan`` has no --precision."""
    if precision is Precision.BF16 and not gpu.bf16:
        fix = "set model.precision: fp16" if in_manifest else "use --precision fp16"
        return f"no bf16 on {gpu.name} ({gpu.architecture}; bf16 needs Ampere or newer): {fix}"
    if precision is Precision.FP8 and not gpu.fp8:
        return f"no fp8 on {gpu.name} ({gpu.architecture}; fp8 needs Hopper, Ada or Blackwell)"
    return None


def best_strategy(q: FitQuery, gpu: GpuModel, total_gpus: int) -> tuple[Sharding, MemoryEstimate, bool]:
    """The first strategy that fits ``total_gpus`` of ``gpu`` (else the most frugal one, not fitting)."""
    tried: list[tuple[Sharding, MemoryEstimate]] = []
    for z in q.strategies(total_gpus):
        est = estimate(replace(q.setup, sharding=z), total_gpus)
        if est.fits(gpu.vram_gb, q.headroom):
            return z, est, True
        tried.append((z, est))
    z, est = min(tried, key=lambda t: t[1].total)
    return z, est, False


def fewest_nodes(q: FitQuery, gpu: GpuModel, max_nodes: int) -> int | None:
    """The fewest machines of 8 ``gpu`` (2 to ``max_nodes``) the job fits on, or None: by bisection, as from 2
    GPUs on the memory one GPU needs only falls as GPUs are added (each sharded part is divided by their number,
    the rest is the same), so the search costs log2(max_nodes) estimates, not one per machine count."""
    if max_nodes < 2 or not best_strategy(q, gpu, MAX_GPUS_PER_NODE * max_nodes)[2]:
        return None
    low, high = 2, max_nodes          # it fits on ``high`` machines
    while low < high:
        mid = (low + high) // 2
        if best_strategy(q, gpu, MAX_GPUS_PER_NODE * mid)[2]:
            high = mid
        else:
            low = mid + 1
    return low


def _shapes(q: FitQuery, gpu: GpuModel, offers: Sequence[Offer]) -> list[tuple[int, int]]:
    """The machine shapes worth trying, fewest GPUs first: every size of one machine, and of several machines of
    8 only the fewest the job fits on (more of them fit too, on the same offer, so they cannot be a better
    answer), or, where none fits, the most (the largest shape searched, said as the reason)."""
    single = {1, 2, 4, MAX_GPUS_PER_NODE} | {o.gpu_count for o in offers if o.gpu == gpu.name}
    nodes = fewest_nodes(q, gpu, q.max_nodes) or q.max_nodes
    multi = [(MAX_GPUS_PER_NODE, nodes)] if nodes > 1 else []
    return sorted([(c, 1) for c in single] + multi, key=lambda cm: (cm[0] * cm[1], cm[1]))


def link_text(o: FitOption) -> str:
    """The LINK cell: the chosen machine's own interconnect (the catalog's, per instance type); "-" for one GPU
    or where no machine is rented (a link is a fact of a machine, not of a GPU model)."""
    return o.offer.interconnect.value if o.count > 1 and o.offer is not None else "-"


def link_advice(sharding: Sharding, count: int) -> LinkAdvice:
    if count == 1:
        return LinkAdvice.SINGLE
    return LinkAdvice.NVLINK if sharding is not Sharding.DDP and count > 2 else LinkAdvice.PCIE_OK


def cheapest_offer(offers: Iterable[Offer], gpu: str, count: int, markets: frozenset[Market],
                   want_nvlink: bool, nodes: int = 1) -> Offer | None:
    """The cheapest offer of ``count`` x ``gpu``; an NVLink machine first when NVLink is advised. For several
    ``nodes``, only a provider where orch launches several machines (the planner's ``single-node-provider``)."""
    from providers.registry import launches_multi_node

    found = [o for o in offers if o.gpu == gpu and o.gpu_count == count and o.market in markets
             and (nodes <= 1 or launches_multi_node(o.provider))]
    if want_nvlink and any(o.interconnect is Interconnect.NVLINK for o in found):
        found = [o for o in found if o.interconnect is Interconnect.NVLINK]
    return min(found, key=lambda o: (o.price_hr, o.provider, o.instance_type, o.region), default=None)


def _option(q: FitQuery, gpu: GpuModel, count: int, nodes: int, offers: Sequence[Offer]) -> FitOption:
    sharding, est, fits = best_strategy(q, gpu, count * nodes)
    link = link_advice(sharding, count)
    offer = cheapest_offer(offers, gpu.name, count, q.markets, link is LinkAdvice.NVLINK, nodes) if fits else None
    notes: list[str] = []
    if offer is not None and link is LinkAdvice.NVLINK and offer.interconnect is not Interconnect.NVLINK:
        notes.append("no NVLink machine in the catalog: PCIe slows the per-layer gathers of sharding")
    if nodes > 1 and sharding is not Sharding.DDP:
        notes.append("across machines: a fast network (InfiniBand/EFA) between them")
    reason = "" if fits else (f"needs {est.total_gb:.1f} GB per GPU on {count * nodes} GPUs, "
                              f"{usable_bytes(gpu.vram_gb, q.headroom) / GB:.1f} GB usable")
    return FitOption(gpu, count, nodes, sharding, est, fits, link, offer, q.hours, q.headroom, reason, tuple(notes))


def fit_gpu(q: FitQuery, gpu: GpuModel, offers: Sequence[Offer]) -> FitOption:
    """The smallest shape of ``gpu`` that fits and that an offer rents (else the smallest that fits, without an
    offer; else, not fitting, the largest shape searched)."""
    q, chosen_note = q.for_gpu(gpu)
    found = _fit_gpu(q, gpu, offers)
    return replace(found, notes=(chosen_note, *found.notes)) if chosen_note else found


def _fit_gpu(q: FitQuery, gpu: GpuModel, offers: Sequence[Offer]) -> FitOption:
    problem = precision_problem(gpu, q.setup.precision)
    if problem:
        est = estimate(replace(q.setup, sharding=q.strategies(1)[0]), 1)
        return FitOption(gpu, 1, 1, q.strategies(1)[0], est, False, LinkAdvice.SINGLE, None, q.hours, q.headroom,
                         problem)
    first_fit: FitOption | None = None
    last: FitOption | None = None
    for count, nodes in _shapes(q, gpu, offers):
        last = _option(q, gpu, count, nodes, offers)
        if not last.fits:
            continue
        if last.offer is not None:
            return last
        first_fit = first_fit or last  # fits, but nobody rents this shape: try the next one
    assert last is not None
    return first_fit or last


def _rank(o: FitOption) -> tuple[object, ...]:
    return (not o.fits, o.price_hr is None, o.price_hr or 0.0, o.total_gpus, -o.gpu.vram_gb, o.gpu.name)


def fit_all(q: FitQuery, offers: Sequence[Offer]) -> list[FitOption]:
    """One option per GPU model (all of the registry, or ``q.gpus``): fitting ones cheapest first."""
    models = [gpu_by_name(g) for g in q.gpus] if q.gpus else list(GPU_MODELS)
    return sorted((fit_gpu(q, g, offers) for g in models), key=_rank)


def _cheapest_fit(q: FitQuery, offers: Sequence[Offer]) -> FitOption | None:
    return next((o for o in fit_all(q, offers) if o.fits), None)


def _where(o: FitOption) -> str:
    price = f" (${o.price_hr:.2f}/h)" if o.price_hr is not None else ""
    return f"{o.shape_text()}{price}"


def relaxations(q: FitQuery, offers: Sequence[Offer]) -> list[str]:
    """The nearest changes that make the job fit somewhere, most specific first (at most five)."""
    s = q.setup
    trials: list[tuple[str, FitQuery]] = []
    if not (q.auto_sharding or s.sharding is Sharding.ZERO3):
        trials.append(("zero3", replace(q, auto_sharding=False, setup=replace(s, sharding=Sharding.ZERO3))))
    if s.method is Method.FULL:
        trials.append(("--method lora", replace(q, setup=replace(s, method=Method.LORA))))
    if s.method is not Method.QLORA and s.precision is not Precision.FP32:
        trials.append(("--method qlora", replace(q, setup=replace(s, method=Method.QLORA))))
    if s.offload is Offload.NONE:
        trials.append(("--sharding zero3 --offload optimizer", replace(
            q, auto_sharding=False, setup=replace(s, sharding=Sharding.ZERO3, offload=Offload.OPTIMIZER))))
    if not s.checkpointing:
        trials.append(("--checkpointing", replace(q, setup=replace(s, checkpointing=True))))
    if s.micro_batch > 1:
        trials.append(("--micro-batch 1", replace(q, setup=replace(s, micro_batch=1))))
    if q.gpus:
        trials.append(("without --gpu", replace(q, gpus=())))
    if q.max_nodes < MAX_NODES:
        trials.append(("--max-nodes", replace(q, max_nodes=MAX_NODES)))
    hints: list[str] = []
    for label, trial in trials:
        found = _cheapest_fit(trial, offers)
        if found is None:
            continue
        if label == "--max-nodes":
            hints.append(f"fits with --max-nodes {found.nodes} on {_where(found)}")
        elif label == "zero3":
            hints.append(f"needs ZeRO-3 across {found.total_gpus} GPUs (--sharding zero3): {_where(found)}")
        elif label == "without --gpu":
            hints.append(f"fits on {_where(found)} without --gpu")
        else:
            hints.append(f"fits with {label} on {_where(found)}")
    return hints[:5]
