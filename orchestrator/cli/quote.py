"""``orch quote``: every matching offer, offline, in a blink."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, check_number, fail
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app

if TYPE_CHECKING:
    from providers.base import GpuRequest, Offer, Provider
    from providers.catalog import CatalogSnapshot


class InterconnectOpt(StrEnum):
    nvlink = "nvlink"
    pcie = "pcie"


class SortOpt(StrEnum):
    price = "price"
    price_per_gpu = "price-per-gpu"


@app.command()
def quote(
    gpu: Annotated[list[str], typer.Option("--gpu", "-g", help="GPU name, alias or short name, optionally "
                                           "NAME:COUNT (H100:8, 4090, 'A100 80GB'); repeat or comma-separate "
                                           "for alternatives. None: list the GPUs.")] = [],  # noqa: B006
    count: Annotated[int | None, typer.Option("--count", "-c", help="GPUs in one machine (default 1).")] = None,
    nodes: Annotated[int, typer.Option("--nodes", "-n", help="Machines; totals and $/h cover all.")] = 1,
    spot: Annotated[bool, typer.Option("--spot", help="Spot/interruptible offers only.")] = False,
    on_demand: Annotated[bool, typer.Option("--on-demand", help="On-demand offers only.")] = False,
    provider: Annotated[list[str], typer.Option("--provider", "-p", help="Only this provider (repeatable).")]
    = [],  # noqa: B006
    region: Annotated[list[str], typer.Option("--region", "-r", help="Region or zone glob, e.g. 'us-*'.")]
    = [],  # noqa: B006
    max_price: Annotated[float | None, typer.Option("--max-price", help="Max $/h for the whole request.")]
    = None,
    min_vram: Annotated[float | None, typer.Option("--min-vram", help="Min GB of memory per GPU.")] = None,
    interconnect: Annotated[InterconnectOpt | None, typer.Option("--interconnect", help="nvlink or pcie.")]
    = None,
    sort: Annotated[SortOpt, typer.Option("--sort", help="price (whole request) or price-per-gpu.")]
    = SortOpt.price,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many rows.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list of offers (fields: docs/cli.md).")]
    = False,
    wide: Annotated[bool, typer.Option("--wide", "-w", help="Every column (VRAM, vCPU/RAM per GPU, link, "
                                       "source), uncut.")] = False,
    all_regions: Annotated[bool, typer.Option("--all-regions", help="One row per region/zone instead of "
                                              "grouping identical offers.")] = False,
    history: Annotated[bool, typer.Option("--history", help="The GPU's price trend per provider over the "
                                          "refreshes (needs --gpu).")] = False,
    live: Annotated[bool, typer.Option("--live", help="Add live offers from configured providers whose APIs "
                                       "price without launching (Vast.ai, Lambda, RunPod, AWS spot).")] = False,
) -> None:
    """Price every matching offer across clouds from the catalog on disk (no network unless --live)."""
    from orchestrator.quote import (
        QuoteInputError,
        SortKey,
        check_region_glob,
        parse_gpu_specs,
        relaxations,
    )
    from orchestrator.quote import (
        quote as run_quote,
    )
    from providers.base import GpuRequest, Market
    from providers.catalog import load_catalog
    from providers.gpus import Interconnect
    from providers.registry import UnknownProviderError, canonical_provider

    try:
        gpus, spec_count = parse_gpu_specs(gpu)
        if count is not None and spec_count is not None and count != spec_count:
            raise QuoteInputError(f"--count {count} contradicts --gpu ...:{spec_count}; give the count once")
        machine_gpus = count if count is not None else spec_count
        if machine_gpus is not None and machine_gpus < 1:
            raise QuoteInputError(f"--count must be 1 or more, got {machine_gpus} (GPUs in one machine, e.g. "
                                  "--count 4)")
        if nodes < 1:
            raise QuoteInputError(f"--nodes must be 1 or more, got {nodes}")
        check_number("--max-price", max_price, low=0)
        check_number("--min-vram", min_vram, low=0)
        if limit is not None and limit < 1:
            raise QuoteInputError(f"--limit must be 1 or more, got {limit}")
        if history and not gpus:
            raise QuoteInputError("--history needs --gpu (e.g. orch quote --history --gpu H100)")
        providers = tuple(dict.fromkeys(canonical_provider(p) for p in provider))
        regions = tuple(check_region_glob(r) for r in region)
    except (QuoteInputError, UnknownProviderError) as exc:
        fail(str(exc), EXIT_BAD_INPUT)

    if history:
        _print_history(gpus, machine_gpus, as_json)
        return
    markets = frozenset(Market)
    if spot and not on_demand:
        markets = frozenset({Market.SPOT})
    elif on_demand and not spot:
        markets = frozenset({Market.ON_DEMAND})
    req = GpuRequest(
        gpus=gpus, count=machine_gpus or 1, nodes=nodes, markets=markets, providers=providers, regions=regions,
        max_price_hr=max_price, min_vram_gb=min_vram,
        interconnect=Interconnect(interconnect.value) if interconnect else None,
    )
    # One GPU's quote reads only that GPU's rows of a refreshed catalog (tests/bench/bench_quote.py).
    catalog = load_catalog(tuple(sorted(gpus)) if gpus else None)
    if not gpus:
        from orchestrator.quote import machine_counts, offers_any_count

        # Every count (unless --count): the same sources as `--gpu X --count N`, asked per count.
        counts = machine_counts(catalog.offers) if machine_gpus is None else (req.count,)
        offers = offers_any_count(lambda r: _offers(r, catalog.offers, live), req, counts)
        _print_gpus(offers, req, machine_gpus is None, catalog, as_json)
        return
    offers = _offers(req, catalog.offers, live)
    rows = run_quote(offers, req, SortKey(sort.value), limit, datetime.now(UTC))

    if as_json:
        sys.stdout.write(dumps([r.to_json() for r in rows], indent=2) + "\n")
        if not rows:
            raise SystemExit(EXIT_NO_MATCH)
        return

    if not rows:
        what = "×".join([str(req.count), "/".join(gpus)])
        sys.stderr.write(f"no offer matches {what}" + (f" on {nodes} nodes" if nodes > 1 else "") + ".\n")
        hints = relaxations(load_catalog().offers, req)
        if hints:
            sys.stderr.write("nearest matches if you relax:\n" + "".join(f"  {h}\n" for h in hints))
        raise SystemExit(EXIT_NO_MATCH)

    from orchestrator.cli.render_quote import print_quote_table

    title = f"{req.count}×{'/'.join(gpus)}" + (f" on {nodes} nodes" if nodes > 1 else "") + \
        f" · {', '.join(sorted(m.value for m in markets))}"
    print_quote_table(rows, catalog, nodes, wide=wide, all_regions=all_regions, title=title)


def _print_gpus(offers: list[Offer], req: GpuRequest, any_count: bool, catalog: CatalogSnapshot,
                as_json: bool) -> None:
    """``orch quote`` with no --gpu: the GPUs on offer, cheapest $/GPU-hour first."""
    from orchestrator.quote import gpu_summaries

    summaries = gpu_summaries(offers, req, any_count)
    if as_json:
        sys.stdout.write(dumps([s.to_json() for s in summaries], indent=2) + "\n")
    else:
        from orchestrator.cli.render_quote import print_gpu_list

        print_gpu_list(summaries, catalog)
    if not summaries:
        raise SystemExit(EXIT_NO_MATCH)


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
        sys.stderr.write(f"no price history for {', '.join(gpus)} yet: each `orch catalog refresh` (or the "
                         "daemon's scheduled one) records what changed\n")
        raise SystemExit(EXIT_NO_MATCH)


def _offers(req: GpuRequest, catalog: Sequence[Offer], live: bool) -> list[Offer]:
    """The catalog, your own machines from orch's config, and (``--live``) live offers: the planner's sources.

    Without --live no SDK is imported: own machines come from their settings alone (pydantic, and only when
    the config names such a provider). A config that cannot be read is noted and left out; with --live it is
    an error, as for every command that builds providers.
    """
    from orchestrator.config import ConfigError, config_path, load_config
    from orchestrator.offer_sources import offer_sources

    if not live and not config_path().exists():
        return offer_sources(catalog).offers(req)
    if not live:
        try:
            return offer_sources(catalog, config=load_config()).offers(req)
        except ConfigError as exc:
            sys.stderr.write(f"note: {exc}; your own machines are not listed\n")
            return offer_sources(catalog).offers(req)
    return _with_live_offers(req, catalog)


def _with_live_offers(req: GpuRequest, catalog: Sequence[Offer]) -> list[Offer]:
    """Catalog, own machines and live offers (marked source=live) from every configured provider that prices
    live. Only here are SDKs imported. A provider that cannot be reached is skipped with a note on stderr;
    its catalog rows stay.
    """
    from dataclasses import replace

    from orchestrator.config import ConfigError, load_config
    from orchestrator.offer_sources import offer_sources
    from orchestrator.wiring import build_providers
    from providers.errors import ProviderError

    try:
        config = load_config()
        providers = build_providers(config)
        sources = offer_sources(catalog, providers=providers, config=config, live=True)
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    if not sources.live:
        sys.stderr.write("note: --live: no configured provider prices live (see `orch providers`)\n")

    class _Noting:
        """Says on stderr which provider could not be asked (the sources then skip it)."""

        def __init__(self, provider: Provider) -> None:
            self.provider = provider

        def offers(self, r: GpuRequest) -> list[Offer]:
            try:
                return self.provider.offers(r)
            except ProviderError as exc:
                sys.stderr.write(f"note: --live: {exc}\n")
                raise

    try:
        return replace(sources, live=tuple(_Noting(p) for p in sources.live)).offers(req)  # type: ignore[arg-type]
    finally:
        for p in providers.values():
            p.close()
