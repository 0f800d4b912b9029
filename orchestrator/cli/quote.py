"""``orch quote``: every matching offer, offline, in a blink."""

from __future__ import annotations

import sys
from datetime import date
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, check_number, fail
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app

if TYPE_CHECKING:
    from providers.base import GpuRequest, Offer, Provider


class InterconnectOpt(StrEnum):
    nvlink = "nvlink"
    pcie = "pcie"


class SortOpt(StrEnum):
    price = "price"
    price_per_gpu = "price-per-gpu"


@app.command()
def quote(
    gpu: Annotated[list[str], typer.Option("--gpu", "-g", help="GPU name or alias; repeat or comma-separate "
                                           "for alternatives (A100-80G, h100, 'A100 80GB').")] = [],  # noqa: B006
    count: Annotated[int, typer.Option("--count", "-c", help="GPUs in one machine.")] = 1,
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
    live: Annotated[bool, typer.Option("--live", help="Add live offers from configured providers whose APIs "
                                       "price without launching (Vast.ai, Lambda, RunPod, AWS spot).")] = False,
) -> None:
    """Price every matching offer across clouds from the offline catalog."""
    from orchestrator.quote import (
        QuoteInputError,
        SortKey,
        check_region_glob,
        relaxations,
        resolve_gpu_names,
    )
    from orchestrator.quote import (
        quote as run_quote,
    )
    from providers.base import GpuRequest, Market
    from providers.catalog import load_catalog
    from providers.gpus import Interconnect
    from providers.registry import UnknownProviderError, canonical_provider

    try:
        gpus = resolve_gpu_names(gpu)
        if count < 1:
            raise QuoteInputError(f"--count must be 1 or more, got {count} (GPUs in one machine, e.g. --count 4)")
        if nodes < 1:
            raise QuoteInputError(f"--nodes must be 1 or more, got {nodes}")
        check_number("--max-price", max_price, low=0)
        check_number("--min-vram", min_vram, low=0)
        if limit is not None and limit < 1:
            raise QuoteInputError(f"--limit must be 1 or more, got {limit}")
        providers = tuple(dict.fromkeys(canonical_provider(p) for p in provider))
        regions = tuple(check_region_glob(r) for r in region)
    except (QuoteInputError, UnknownProviderError) as exc:
        fail(str(exc), EXIT_BAD_INPUT)

    markets = frozenset(Market)
    if spot and not on_demand:
        markets = frozenset({Market.SPOT})
    elif on_demand and not spot:
        markets = frozenset({Market.ON_DEMAND})
    req = GpuRequest(
        gpus=gpus, count=count, nodes=nodes, markets=markets, providers=providers, regions=regions,
        max_price_hr=max_price, min_vram_gb=min_vram,
        interconnect=Interconnect(interconnect.value) if interconnect else None,
    )
    catalog = load_catalog()
    offers = list(catalog.offers)
    if live:
        offers = _with_live_offers(req, offers)
    rows = run_quote(offers, req, SortKey(sort.value), limit, date.today())

    if as_json:
        sys.stdout.write(dumps([r.to_json() for r in rows], indent=2) + "\n")
        if not rows:
            raise SystemExit(EXIT_NO_MATCH)
        return

    if not rows:
        what = "×".join([str(count), "/".join(gpus) or "any GPU"])
        sys.stderr.write(f"no offer matches {what}" + (f" on {nodes} nodes" if nodes > 1 else "") + ".\n")
        hints = relaxations(catalog.offers, req)
        if hints:
            sys.stderr.write("nearest matches if you relax:\n" + "".join(f"  {h}\n" for h in hints))
        raise SystemExit(EXIT_NO_MATCH)

    from orchestrator.cli.render_quote import print_quote_table

    print_quote_table(rows, catalog, nodes)


def _with_live_offers(req: GpuRequest, offers: list[Offer]) -> list[Offer]:
    """Catalog plus live offers (marked source=live) from every configured provider that prices live.

    Only here are SDKs imported: ``orch quote`` without --live stays offline and instant. A provider that
    cannot be reached is skipped with a note on stderr; its catalog rows stay.
    """
    from orchestrator.config import ConfigError, load_config
    from orchestrator.planner import gather_offers
    from orchestrator.wiring import build_providers
    from providers.base import Capability
    from providers.errors import ProviderError

    try:
        providers = build_providers(load_config())
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    live = [p for p in providers.values() if Capability.LIVE_OFFERS in p.capabilities]
    if not live:
        sys.stderr.write("note: --live: no configured provider prices live (see `orch providers`)\n")

    class _Noting:
        """Says on stderr which provider could not be asked (gather_offers then skips it)."""

        def __init__(self, provider: Provider) -> None:
            self.provider = provider

        def offers(self, r: GpuRequest) -> list[Offer]:
            try:
                return self.provider.offers(r)
            except ProviderError as exc:
                sys.stderr.write(f"note: --live: {exc}\n")
                raise

    try:
        return gather_offers(req, offers, [_Noting(p) for p in live])
    finally:
        for p in providers.values():
            p.close()
