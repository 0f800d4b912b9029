"""``orch quote``'s work, without the command-line framework.

The command (``orchestrator.cli.quote``) and the lean entry point (``orchestrator.cli.entry``) both call
``run_quote``, so a quote prints the same bytes whichever parsed its flags. Nothing here imports Typer, Click
or Rich.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, check_number, fail, wrap
from orchestrator.cli.jsonout import dumps

TYPE_CHECKING = False  # not typing's: `orch quote` imports this module, and typing costs it ~3 ms

if TYPE_CHECKING:
    pass


class InterconnectOpt(StrEnum):
    nvlink = "nvlink"
    pcie = "pcie"


class SortOpt(StrEnum):
    price = "price"
    price_per_gpu = "price-per-gpu"


@dataclass(frozen=True, slots=True)
class QuoteArgs:
    """``orch quote``'s flags, parsed (docs/cli.md)."""

    gpu: tuple[str, ...] = ()
    count: int | None = None
    nodes: int = 1
    spot: bool = False
    on_demand: bool = False
    provider: tuple[str, ...] = ()
    region: tuple[str, ...] = ()
    max_price: float | None = None
    min_vram: float | None = None
    interconnect: InterconnectOpt | None = None
    sort: SortOpt = SortOpt.price
    limit: int | None = None
    as_json: bool = False
    wide: bool = False
    all_regions: bool = False
    history: bool = False
    live: bool = False


def run_quote(a: QuoteArgs) -> None:
    """Price every matching offer (or, with no GPU, list the GPUs) and print it; exit 1 when nothing matches,
    2 on bad input."""
    from providers.catalog import load_catalog
    from providers.gpus import Interconnect
    from providers.offer import GpuRequest, Market

    gpus, machine_gpus, providers, regions = _checked(a)
    if a.history:
        _print_history(gpus, machine_gpus, a.as_json)
        return
    # --spot or --on-demand alone: that market; both or neither: every market.
    markets = frozenset(Market) if a.spot == a.on_demand else frozenset({Market.SPOT if a.spot else Market.ON_DEMAND})
    req = GpuRequest(
        gpus=gpus, count=machine_gpus or 1, nodes=a.nodes, markets=markets, providers=providers, regions=regions,
        max_price_hr=a.max_price, min_vram_gb=a.min_vram,
        interconnect=Interconnect(a.interconnect.value) if a.interconnect else None,
    )
    if not gpus:
        from orchestrator.cli.quote_gpus import gpu_list, print_gpus

        print_gpus(*gpu_list(req, machine_gpus, a.live), a.as_json)
        return
    # One GPU's quote reads only that GPU's rows of a refreshed catalog (tests/bench/bench_quote.py).
    # From the prebuilt index (providers/catalog/quickindex.py), built here when missing or stale.
    catalog = load_catalog(tuple(sorted(gpus)), build_index=True)
    from orchestrator.cli.quote_sources import offers_for
    from orchestrator.offers.quote import SortKey, relaxations
    from orchestrator.offers.quote import quote as quote_offers

    offers = offers_for(req, catalog.offers, a.live)
    rows = quote_offers(offers, req, SortKey(a.sort.value), a.limit, datetime.now(UTC))

    if a.as_json:
        sys.stdout.write(dumps([r.to_json() for r in rows], indent=2) + "\n")
        if not rows:
            raise SystemExit(EXIT_NO_MATCH)
        return

    if not rows:
        what = "×".join([str(req.count), "/".join(gpus)])
        sys.stderr.write(f"no offer matches {what}" + (f" on {a.nodes} nodes" if a.nodes > 1 else "") + ".\n")
        hints = relaxations(load_catalog().offers, req)
        if hints:
            sys.stderr.write("nearest matches if you relax:\n" + "".join(f"  {h}\n" for h in hints))
        raise SystemExit(EXIT_NO_MATCH)

    from orchestrator.cli.render_quote import print_quote_table

    title = f"{req.count}×{'/'.join(gpus)}" + (f" on {a.nodes} nodes" if a.nodes > 1 else "") + \
        f" · {', '.join(sorted(m.value for m in markets))}"
    print_quote_table(rows, catalog, a.nodes, wide=a.wide, all_regions=a.all_regions, title=title)


def _checked(a: QuoteArgs) -> tuple[tuple[str, ...], int | None, tuple[str, ...], tuple[str, ...]]:
    """The GPUs, GPUs per machine (None: any count), providers and regions asked for; exit 2 on bad input."""
    from orchestrator.offers.quote_input import QuoteInputError, check_region_glob, parse_gpu_specs

    try:
        gpus, spec_count = parse_gpu_specs(a.gpu)
        if a.count is not None and spec_count is not None and a.count != spec_count:
            raise QuoteInputError(f"--count {a.count} contradicts --gpu ...:{spec_count}; give the count once")
        machine_gpus = a.count if a.count is not None else spec_count
        if machine_gpus is not None and machine_gpus < 1:
            raise QuoteInputError(f"--count must be 1 or more, got {machine_gpus} (GPUs in one machine, e.g. "
                                  "--count 4)")
        if a.nodes < 1:
            raise QuoteInputError(f"--nodes must be 1 or more, got {a.nodes}")
        if a.nodes > 1:   # imported only here: a one-machine quote stays lean
            from orchestrator.fit.shapes import MAX_NODES

            if a.nodes > MAX_NODES:   # as a manifest's resources.nodes: a $/h for 10^8 machines is a typo's
                raise QuoteInputError(f"--nodes must be at most {MAX_NODES} (the most machines orch runs a job "
                                      f"on), got {a.nodes}")
        check_number("--max-price", a.max_price, low=0)
        check_number("--min-vram", a.min_vram, low=0)
        if a.limit is not None and a.limit < 1:
            raise QuoteInputError(f"--limit must be 1 or more, got {a.limit}")
        if a.history and not gpus:
            raise QuoteInputError("--history needs --gpu (e.g. orch quote --history --gpu H100)")
        providers = _canonical_providers(a.provider)
        regions = tuple(check_region_glob(r) for r in a.region)
    except QuoteInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    return gpus, machine_gpus, providers, regions


def _canonical_providers(names: tuple[str, ...]) -> tuple[str, ...]:
    """orch's names for ``--provider`` values, once each; exit 2 on an unknown one. The registry is imported only
    when a provider is named (most quotes name none)."""
    if not names:
        return ()
    from providers.registry import UnknownProviderError, canonical_provider

    try:
        return tuple(dict.fromkeys(canonical_provider(p) for p in names))
    except UnknownProviderError as exc:
        fail(str(exc), EXIT_BAD_INPUT)


def _print_history(gpus: tuple[str, ...], count: int | None, as_json: bool) -> None:
    """``--history``: each GPU's price trend per provider, from the refreshes' price history."""
    from providers.catalog.history import trend
    from providers.catalog.loader import user_catalog_dir

    found = {g: trend(user_catalog_dir(), g, count) for g in gpus}
    if as_json:
        doc = [{"gpu": g, "provider": t.provider, "market": t.market,
                "points": [{"at": p.at.isoformat(), "price_per_gpu_hr": round(p.price_per_gpu_hr, 6)}
                           for p in t.points]} for g, ts in found.items() for t in ts]
        sys.stdout.write(dumps(doc, indent=2) + "\n")
    else:
        from orchestrator.cli.render_quote import print_history

        for g, ts in found.items():
            if ts:
                print_history(ts, g)
    if not any(found.values()):
        sys.stderr.write(wrap(f"no price history for {', '.join(gpus)} yet: each `orch catalog refresh` (or "
                              "the daemon's scheduled one) records what changed") + "\n")
        raise SystemExit(EXIT_NO_MATCH)
