"""``orch quote`` with no ``--gpu``: the GPU list's offer groups, from the quote index or every offer, and
the list printed (``orchestrator.offers.gpu_list`` summarises; ``render_quote`` draws the table)."""

from __future__ import annotations

import sys

from orchestrator.cli.errors import EXIT_NO_MATCH
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.quote_sources import LiveOffers, offers_for

TYPE_CHECKING = False  # not typing's: `orch quote` imports this module, and typing costs it ~3 ms

if TYPE_CHECKING:
    from providers.base import GpuRequest, Offer
    from providers.catalog import CatalogSnapshot
    from providers.catalog.groups import OfferGroup


def gpu_list(req: GpuRequest, machine_gpus: int | None, live: bool) -> tuple[list[OfferGroup], tuple[str, ...]]:
    """The GPU list's offer groups (every GPU count; ``machine_gpus``: that count only) and the providers priced
    from a refresh. A list with no filter merges your own machines into the catalog's groups kept in the quote
    index (a 10k-row refreshed catalog's rows are not decoded: tests/bench/bench_quote.py); the same groups as
    grouping every offer (tests/test_gpu_list_groups.py)."""
    from orchestrator.offers.gpu_list import machine_counts, offers_any_count
    from providers.catalog.groups import group_offers, merge_groups
    from providers.catalog.loader import load_catalog, load_catalog_groups
    from providers.offer import GpuRequest

    noted: set[str] = set()   # a config problem is noted once, not once per count
    indexed = None
    if not live and machine_gpus is None and req == GpuRequest():   # no filter (--nodes 2 is one: see below)
        indexed = load_catalog_groups()
    if indexed is not None and indexed.groups is not None:
        counts = machine_counts(g.count for g in indexed.groups)   # every catalog row is in a group
        own = offers_any_count(lambda r: offers_for(r, (), False, noted), req, counts)
        sold = frozenset().union(*(g.providers for g in indexed.groups))
        # An own offer of a provider the catalog lists could replace a catalog row (the same offer key):
        # only the full read knows which, so that case takes it.
        if not any(o.provider in sold for o in own):
            return merge_groups(indexed.groups, group_offers(own)), indexed.refreshed
    catalog = load_catalog(None, build_index=True)
    found = _every_offer(req, catalog, machine_gpus, live, noted)
    if req.nodes > 1:   # as `--gpu G --nodes N` (offers.quote): only where orch launches several machines,
        # and your machines only where `nodes` of one kind are free in one place (one host is one node)
        from providers.catalog.query import own_machines_free, own_machines_short
        from providers.registry import launches_multi_node

        free = own_machines_free(found)
        found = [o for o in found
                 if launches_multi_node(o.provider) and own_machines_short(o, req.nodes, free) is None]
    return group_offers(found), catalog.refreshed


def _every_offer(req: GpuRequest, catalog: CatalogSnapshot, machine_gpus: int | None, live: bool,
                 noted: set[str]) -> list[Offer]:
    """The offers of every GPU count (``machine_gpus``: that count only): the same sources as ``--gpu X --count
    N``, asked per count."""
    from orchestrator.offers.gpu_list import machine_counts, offers_any_count
    from providers.catalog.groups import catalog_by_count

    counts = machine_counts(o.gpu_count for o in catalog.offers) if machine_gpus is None else (req.count,)
    # Each count's request is matched against that count's rows only: a row of another count never matches
    # (``offer_matches``), and a 10k-row refreshed catalog is then scanned once, not once per count.
    by_count = catalog_by_count(catalog.offers)
    if live:
        live_offers = LiveOffers()   # built once: not the providers, their calls and notes once per count
        try:
            return offers_any_count(lambda r: live_offers.offers(r, by_count.get(r.count, ())), req, counts)
        finally:
            live_offers.close()
    return offers_any_count(lambda r: offers_for(r, by_count.get(r.count, ()), False, noted), req, counts)


def print_gpus(groups: list[OfferGroup], refreshed: tuple[str, ...], as_json: bool) -> None:
    """``orch quote`` with no --gpu: the GPUs on offer, cheapest $/GPU-hour first."""
    from orchestrator.offers.gpu_list import gpu_summaries

    summaries = gpu_summaries(groups)
    if as_json:
        sys.stdout.write(dumps([s.to_json() for s in summaries], indent=2) + "\n")
    else:
        from orchestrator.cli.render_quote import print_gpu_list

        print_gpu_list(summaries, refreshed)
    if not summaries:
        raise SystemExit(EXIT_NO_MATCH)
