"""``orch quote``: every matching offer, offline, in a blink. The flags are parsed here (or, for the common
forms, by the lean entry point ``orchestrator.cli.entry``); the work is ``orchestrator.cli.quote_run``."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.cli.main import app
from orchestrator.cli.quote_run import InterconnectOpt, QuoteArgs, SortOpt, run_quote


@app.command()
def quote(
    gpu: Annotated[list[str], typer.Option("--gpu", "-g", help="GPU name, alias or short name, optionally "
                                           "NAME:COUNT (H100:8, 4090, 'A100 80GB'); repeat or comma-separate "
                                           "for alternatives. None: list the GPUs.")] = [],  # noqa: B006
    count: Annotated[int | None, typer.Option("--count", "-c", help="GPUs in one machine (default 1).")] = None,
    nodes: Annotated[int, typer.Option("--nodes", "-n", help="Machines (1 to 256); totals and $/h cover all.")] = 1,
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
    run_quote(QuoteArgs(
        gpu=tuple(gpu), count=count, nodes=nodes, spot=spot, on_demand=on_demand, provider=tuple(provider),
        region=tuple(region), max_price=max_price, min_vram=min_vram, interconnect=interconnect, sort=sort,
        limit=limit, as_json=as_json, wide=wide, all_regions=all_regions, history=history, live=live,
    ))
