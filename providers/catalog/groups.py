"""The GPU list's unit: one GPU at one GPUs-per-machine count, its cheapest offer, who sells it, how many offers.

``orch quote`` with no ``--gpu`` summarises every offer. On a refreshed catalog of 10,000 rows, building those
10,000 ``Offer`` values was most of its time (tests/bench/bench_quote.py), so the quote index (``quickindex``)
also keeps the catalog's groups, and the quote merges your own machines' groups into them (``merge_groups``):
the same summaries as grouping every offer, from a few dozen rows.

Why merging is exact: within one GPU count, the cheapest by (price per GPU-hour, price) is the first such offer
in the order the sources answer (the catalog's rows, then your own machines'), and ``merge_groups`` keeps the
first group's offer on a tie; across counts two offers cannot tie (the same price per GPU-hour and the same
price mean the same count), so which count's group comes first does not matter. No third-party imports: ``orch
quote`` runs this on every call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from providers.catalog.query import match_offers
from providers.offer import GpuRequest, Offer

__all__ = ["OfferGroup", "catalog_by_count", "catalog_groups", "group_offers", "merge_groups"]


@dataclass(frozen=True, slots=True)
class OfferGroup:
    """The offers of one GPU at one GPUs-per-machine count: the cheapest, the providers, how many."""

    gpu: str
    count: int
    cheapest: Offer
    providers: frozenset[str]
    offers: int


def _cheaper(a: Offer, b: Offer) -> bool:
    """``a`` strictly cheaper than ``b`` per GPU-hour, then per hour: a tie keeps ``b``, the earlier one."""
    return (a.price_per_gpu_hr, a.price_hr) < (b.price_per_gpu_hr, b.price_hr)


def group_offers(offers: Iterable[Offer]) -> list[OfferGroup]:
    """One group per (GPU, count) of ``offers``, in order of first appearance; each group's cheapest is the
    first of its offers with the lowest (price per GPU-hour, price), the one ``min`` picks in that order."""
    groups: dict[tuple[str, int], OfferGroup] = {}
    for o in offers:
        key = (o.gpu, o.gpu_count)
        g = groups.get(key)
        if g is None:
            groups[key] = OfferGroup(o.gpu, o.gpu_count, o, frozenset({o.provider}), 1)
        else:
            groups[key] = replace(g, cheapest=o if _cheaper(o, g.cheapest) else g.cheapest,
                                  providers=g.providers | {o.provider}, offers=g.offers + 1)
    return list(groups.values())


def merge_groups(first: Iterable[OfferGroup], then: Iterable[OfferGroup]) -> list[OfferGroup]:
    """``group_offers`` over ``first``'s offers followed by ``then``'s, from the groups alone. Exact only when no
    offer is in both (the caller's to check: an offer of ``then`` with the key of one of ``first`` would replace
    it, not join it)."""
    merged = {(g.gpu, g.count): g for g in first}
    for g in then:
        key = (g.gpu, g.count)
        old = merged.get(key)
        if old is None:
            merged[key] = g
        else:
            merged[key] = replace(old, cheapest=g.cheapest if _cheaper(g.cheapest, old.cheapest) else old.cheapest,
                                  providers=old.providers | g.providers, offers=old.offers + g.offers)
    return list(merged.values())


def catalog_by_count(catalog: Iterable[Offer]) -> dict[int, list[Offer]]:
    """The catalog's rows by GPUs per machine, each list in the catalog's order."""
    out: dict[int, list[Offer]] = {}
    for o in catalog:
        out.setdefault(o.gpu_count, []).append(o)
    return out


def catalog_groups(offers: Sequence[Offer]) -> list[OfferGroup] | None:
    """The groups the GPU list makes of the catalog's rows for a quote with no filter: each count's rows in the
    order ``match_offers`` answers them. None when two rows share an offer key (the GPU list would keep one)."""
    if len({o.key for o in offers}) != len(offers):
        return None
    by_count = catalog_by_count(offers)
    return group_offers(o for c in sorted(by_count) for o in match_offers(by_count[c], GpuRequest(count=c)))
