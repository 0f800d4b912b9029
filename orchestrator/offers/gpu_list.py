"""``orch quote`` with no ``--gpu``: the GPUs on offer, each at its cheapest $/GPU-hour, and who sells it.

Apart from ``quote.py`` so that a quote for one GPU (table or ``--json``) does not define what only the GPU list
uses (each dataclass costs a quote's start ~0.5 ms: tests/bench/bench_quote.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from providers.catalog.groups import OfferGroup
from providers.gpus import gpu_by_name
from providers.offer import GpuRequest, Offer

__all__ = ["GpuSummary", "gpu_summaries", "machine_counts", "offers_any_count"]


@dataclass(frozen=True, slots=True)
class GpuSummary:
    """One line of the GPU list: a GPU, its cheapest $/GPU-hour across the matching offers, who sells it."""

    gpu: str
    vram_gb: int
    cheapest_per_gpu_hr: float
    cheapest: Offer
    providers: tuple[str, ...]
    offers: int
    counts: tuple[int, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        return {
            "gpu": self.gpu,
            "vram_gb": self.vram_gb,
            "cheapest_price_per_gpu_hr": round(self.cheapest_per_gpu_hr, 6),
            "cheapest_market": self.cheapest.market.value,
            "cheapest_provider": self.cheapest.provider,
            "providers": list(self.providers),
            "offers": self.offers,
            "gpu_counts": list(self.counts),
        }


#: GPU counts asked of sources that know no fixed list (your own machines, live APIs) besides the catalog's.
_USUAL_COUNTS = (1, 2, 4, 8, 16)


def machine_counts(catalog_counts: Iterable[int]) -> tuple[int, ...]:
    """Every GPUs-per-machine count an offer may have: the catalog's, and the usual ones."""
    return tuple(sorted(set(catalog_counts) | set(_USUAL_COUNTS)))


def offers_any_count(
    fetch: Callable[[GpuRequest], Sequence[Offer]], req: GpuRequest, counts: Iterable[int]
) -> list[Offer]:
    """The offers ``--gpu X --count N`` would see, for every count: ``fetch`` (the offer sources of one request)
    asked once per count, so the GPU list and the per-GPU quote read the same offer set."""
    found: dict[tuple[object, ...], Offer] = {}
    for count in counts:
        for o in fetch(replace(req, count=count)):
            found.setdefault(o.key, o)
    return list(found.values())


def gpu_summaries(groups: Iterable[OfferGroup]) -> list[GpuSummary]:
    """Per GPU of ``groups`` (``providers.catalog.groups``: the offers ``offers_any_count`` returned, already held
    to the request, grouped per GPU count), cheapest $/GPU-hour first."""
    by_gpu: dict[str, list[OfferGroup]] = {}
    for g in groups:
        by_gpu.setdefault(g.gpu, []).append(g)
    out = []
    for gpu, found in by_gpu.items():
        # Offers of two counts never tie on (price per GPU-hour, price): the group order does not matter.
        best = min((g.cheapest for g in found), key=lambda o: (o.price_per_gpu_hr, o.price_hr))
        out.append(
            GpuSummary(
                gpu,
                gpu_by_name(gpu).vram_gb,
                best.price_per_gpu_hr,
                best,
                tuple(sorted(frozenset().union(*(g.providers for g in found)))),
                sum(g.offers for g in found),
                tuple(sorted(g.count for g in found)),
            )
        )
    out.sort(key=lambda g: (g.cheapest_per_gpu_hr, g.gpu))
    return out
