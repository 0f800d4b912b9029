"""The memory model inside ``orch plan`` and the engine: which offers a model fits, which GPUs to ask for
when a manifest names a model but no GPU, and the warnings a buyer should read.

Hooks, kept in this module so the planner stays small: ``FitCheck`` travels in ``PlanRequest.fit`` and the
planner rejects offers it refuses; ``resolve_gpus`` fills ``PlanRequest.gpus``/``count`` for a model-only
manifest; ``plan_warnings`` adds "does not fit", "overprovisioned" and software-compatibility lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from orchestrator.fit.compat import compat_warnings
from orchestrator.fit.memory import GB, usable_bytes
from orchestrator.fit.search import FitQuery, best_strategy, fit_all, fit_gpu, precision_problem
from orchestrator.words import plural
from providers.base import Offer
from providers.gpus import GPU_MODELS, gpu_by_name

#: "Far larger than needed": the job would use less than this share of the chosen GPUs' usable memory ...
OVERPROVISIONED_USE = 0.5
#: ... and a shape that fits costs at most this share of the chosen offer's $/h.
OVERPROVISIONED_PRICE = 2 / 3


class FitRejection:
    MODEL_DOES_NOT_FIT = "model-does-not-fit"
    PRECISION_UNSUPPORTED = "precision-unsupported"


@dataclass(frozen=True, slots=True)
class FitCheck:
    """Whether the job's model fits an offer's GPUs (``count`` per machine x ``nodes``)."""

    query: FitQuery

    def rejection(self, gpu: str, count: int, nodes: int) -> str | None:
        try:
            model = gpu_by_name(gpu)
        except KeyError:
            return None   # a GPU the registry does not know: nothing to say
        if precision_problem(model, self.query.setup.precision):
            return FitRejection.PRECISION_UNSUPPORTED
        return None if best_strategy(self.query, model, count * nodes)[2] else FitRejection.MODEL_DOES_NOT_FIT


def _counts(offers: Sequence[Offer]) -> list[int]:
    return sorted({1, 2, 4, 8} | {o.gpu_count for o in offers})


def allowed_offers(offers: Iterable[Offer], providers_allow: Sequence[str] = (), providers_deny: Sequence[str] = (),
                   regions_allow: tuple[str, ...] = (), regions_deny: tuple[str, ...] = ()) -> list[Offer]:
    """The offers a job's provider and region lists allow (what resolving and advice may compare)."""
    from providers.catalog.query import region_matches

    return [o for o in offers if (not providers_allow or o.provider in providers_allow)
            and o.provider not in providers_deny and region_matches(o, regions_allow)
            and not (regions_deny and region_matches(o, regions_deny))]


def resolve_gpus(query: FitQuery, offers: Sequence[Offer], nodes: int,
                 count: int | None = None) -> tuple[tuple[str, ...], int]:
    """(GPU names, GPUs per machine) for a manifest that names a model but no GPU (``count``: the manifest's,
    when it gives one).

    For each machine size, the GPU models the job fits on ``nodes`` such machines; the size whose cheapest
    fitting offer is cheapest wins (ties: fewer GPUs), and every GPU model fitting at that size is acceptable,
    cheapest first, so the engine can still fall back to another model. Nothing fits: ``((), 1)`` (every offer
    is then rejected as model-does-not-fit)."""
    best: tuple[float, int, tuple[str, ...]] | None = None
    for size in [count] if count else _counts(offers):
        fitting = [g.name for g in GPU_MODELS if not precision_problem(g, query.setup.precision)
                   and best_strategy(query, g, size * nodes)[2]]
        if not fitting:
            continue
        prices = {g: min((o.price_hr for o in offers if o.gpu == g and o.gpu_count == size
                          and o.market in query.markets), default=float("inf")) for g in fitting}
        ranked = tuple(sorted(fitting, key=lambda g: (prices[g], g)))
        cheapest = prices[ranked[0]]
        if best is None or cheapest < best[0]:
            best = (cheapest, size, ranked)
    if best is None:
        return (), count or 1
    return best[2], best[1]


def job_warnings(fit: FitCheck | None, requested: Sequence[str], count: int, nodes: int, chosen: Offer | None,
                 offers: Iterable[Offer], image: str | None) -> list[str]:
    """``plan_warnings`` for a job with a model; for one without, the image's CUDA against the chosen GPU."""
    if fit is not None:
        return plan_warnings(fit.query, requested, count, nodes, chosen, offers, image)
    if chosen is None or not image:
        return []
    try:
        return compat_warnings(gpu_by_name(chosen.gpu), image, None)
    except KeyError:
        return []


def _money(usd: float) -> str:
    return f"${usd:,.2f}"


def plan_warnings(query: FitQuery, requested: Sequence[str], count: int, nodes: int, chosen: Offer | None,
                  offers: Iterable[Offer], image: str | None) -> list[str]:
    """What ``orch plan`` says about the model: requested GPUs that do not fit, a chosen machine far larger
    than needed while a cheaper one fits, and image/precision mismatches with the chosen GPU."""
    offers = list(offers)
    out: list[str] = []
    check = FitCheck(query)
    for name in requested:
        gpu = gpu_by_name(name)
        problem = precision_problem(gpu, query.setup.precision, in_manifest=True)
        if problem:
            out.append(f"requested {name} cannot run this job: {problem}")
            continue
        if check.rejection(name, count, nodes):
            est = best_strategy(query, gpu, count * nodes)[1]
            better = fit_gpu(replace(query, max_nodes=max(8, nodes)), gpu, offers)
            where = f"; fits on {better.shape_text()} ({better.sharding.value})" if better.fits else ""
            out.append(f"requested {name} x{count}{f' x{nodes} nodes' if nodes > 1 else ''} does not fit: needs "
                       f"~{est.total_gb:.1f} GB per GPU, {usable_bytes(gpu.vram_gb, query.headroom) / GB:.1f} GB "
                       f"usable{where}")
    if chosen is None and not requested:
        out += _no_fit(query, nodes, offers)
    if chosen is not None:
        out += _overprovisioned(query, chosen, nodes, offers)
        out += compat_warnings(gpu_by_name(chosen.gpu), image, query.setup.precision)
    return out


def _no_fit(query: FitQuery, nodes: int, offers: list[Offer]) -> list[str]:
    best = next((o for o in fit_all(replace(query, gpus=()), offers) if o.fits and o.offer is not None), None)
    if best is None:
        return [f"the model fits on no offer within {plural(query.max_nodes, 'machine')} "
                "(try orch fit for relaxations)"]
    price = f" at {_money(best.price_hr)}/h" if best.price_hr is not None else ""
    if best.nodes != nodes:
        return [f"the model needs {plural(best.nodes, 'machine')}: set resources.nodes: {best.nodes} "
                f"(e.g. {best.shape_text()}{price}, {best.sharding.value})"]
    return [f"the model fits on {best.shape_text()}{price} ({best.sharding.value})"]


def _overprovisioned(query: FitQuery, chosen: Offer, nodes: int, offers: list[Offer]) -> list[str]:
    try:
        gpu = gpu_by_name(chosen.gpu)
    except KeyError:
        return []
    _, est, fits = best_strategy(query, gpu, chosen.gpu_count * nodes)
    if not fits or est.total > OVERPROVISIONED_USE * usable_bytes(gpu.vram_gb, query.headroom):
        return []
    chosen_price = chosen.price_hr * nodes
    cheaper = [o for o in fit_all(replace(query, gpus=()), offers)
               if o.fits and o.price_hr is not None and o.price_hr <= OVERPROVISIONED_PRICE * chosen_price]
    if not cheaper:
        return []
    alt = cheaper[0]
    shape = f"{alt.gpu.name} x{alt.count}" + (f" x{alt.nodes} nodes" if alt.nodes > 1 else "")
    mine = f"{chosen.gpu} x{chosen.gpu_count}" + (f" x{nodes} nodes" if nodes > 1 else "")
    return [f"overprovisioned: an {shape} fits at {_money(alt.price_hr or 0)}/h vs {mine} at "
            f"{_money(chosen_price)}/h (the job needs ~{est.total_gb:.0f} GB of {gpu.vram_gb} GB per GPU)"]
