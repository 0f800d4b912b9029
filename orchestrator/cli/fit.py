"""``orch fit``: which GPUs a training job needs, how many, and what the cheapest of them costs. Offline."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, check_number, fail, wrap
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app
from orchestrator.words import plural


@app.command()
def fit(
    params: Annotated[str | None, typer.Option("--params", help="Parameter count: 7B, 70B, 350M (1000T at "
                                               "most).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="A well-known model standing for its shape "
                                              "(llama-3-8b, llama-3-70b, mistral-7b, sdxl, ...).")] = None,
    method: Annotated[str, typer.Option("--method", help="full, lora or qlora.")] = "full",
    precision: Annotated[str | None, typer.Option("--precision", help="fp32, bf16, fp16 or fp8 (default: bf16 "
                                                  "where the GPU has it, else fp16).", show_default=False)] = None,
    optimizer: Annotated[str, typer.Option("--optimizer", help="adamw, adamw-8bit or sgd.")] = "adamw",
    sharding: Annotated[str, typer.Option("--sharding", help="auto, ddp, zero1, zero2, zero3 or fsdp.")] = "auto",
    offload: Annotated[str, typer.Option("--offload", help="none, optimizer or params (CPU offload).")] = "none",
    seq_len: Annotated[int, typer.Option("--seq-len", help="Tokens per sample.")] = 2048,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="Samples per GPU per step.")] = 1,
    layers: Annotated[int | None, typer.Option("--layers", help="Transformer blocks (overrides the shape).")]
    = None,
    hidden: Annotated[int | None, typer.Option("--hidden", help="Hidden size (overrides the shape).")] = None,
    heads: Annotated[int | None, typer.Option("--heads", help="Attention heads.")] = None,
    vocab: Annotated[int | None, typer.Option("--vocab", help="Vocabulary size.")] = None,
    lora_rank: Annotated[int, typer.Option("--lora-rank", help="LoRA rank (lora/qlora).")] = 16,
    checkpointing: Annotated[bool, typer.Option("--checkpointing/--no-checkpointing",
                                                help="Full activation checkpointing.")] = True,
    eager_attention: Annotated[bool, typer.Option("--eager-attention", help="Attention keeps its s x s scores "
                                                  "(no FlashAttention/SDPA).")] = False,
    gpu: Annotated[list[str], typer.Option("--gpu", "-g", help="Only these GPUs (repeat or comma-separate).")]
    = [],  # noqa: B006
    max_nodes: Annotated[int, typer.Option("--max-nodes", help="Most machines to consider (1 to 256).")] = 8,
    headroom: Annotated[float, typer.Option("--headroom", help="Fraction of GPU memory kept free.")] = 0.10,
    spot: Annotated[bool, typer.Option("--spot", help="Spot offers only.")] = False,
    on_demand: Annotated[bool, typer.Option("--on-demand", help="On-demand offers only.")] = False,
    hours: Annotated[float | None, typer.Option(
        "--hours", help="Estimated run time (at most 87600, ten years), for the $ column.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list of options (docs/cli.md).")] = False,
) -> None:
    """For each GPU model: the fewest GPUs that fit the training job, GB per GPU, link, cheapest offer."""
    from orchestrator.fit.render import fit_table
    from orchestrator.fit.request import FitInputError, FitWords, build_query, describe
    from orchestrator.fit.search import fit_all, relaxations
    from orchestrator.inputs.durations import MAX_ESTIMATED_HOURS
    from orchestrator.offers.quote import QuoteInputError, resolve_gpu_names
    from providers.base import Market
    from providers.catalog import load_catalog

    check_number("--hours", hours, low=0, above=True, high=MAX_ESTIMATED_HOURS)   # ten years: more is a typo
    markets = frozenset(Market)
    if spot != on_demand:
        markets = frozenset({Market.SPOT if spot else Market.ON_DEMAND})
    words = FitWords(params, model, method, precision, optimizer, sharding, offload, seq_len, micro_batch, layers,
                     hidden, heads, vocab, lora_rank, checkpointing, not eager_attention)
    try:
        gpus = resolve_gpu_names(gpu)
        query = build_query(words, gpus=gpus, markets=markets, hours=hours, max_nodes=max_nodes,
                            headroom=headroom)
    except (FitInputError, QuoteInputError) as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    catalog = load_catalog()
    options = fit_all(query, catalog.offers)
    if as_json:
        sys.stdout.write(dumps([o.to_json() for o in options], indent=2) + "\n")
    if not any(o.fits for o in options):
        hints = relaxations(query, catalog.offers)
        sys.stderr.write(wrap(f"error: nothing fits within {plural(max_nodes, 'machine')}: {describe(query)}",
                              "    ") + "\n")
        for hint in hints or ["(no change of method, sharding or offload helps)"]:
            sys.stderr.write(wrap(hint, "    ", "  ") + "\n")
        raise SystemExit(EXIT_NO_MATCH)
    if not as_json:
        origin = "shipped catalog" if catalog.origin == "shipped" else f"catalog {catalog.origin}"
        oldest = catalog.oldest()
        note = (f"Prices: the {origin}, list prices" + (f" as of {oldest.isoformat()}" if oldest else "")
                + ("" if hours else "; add --hours N for the $ column") + ". Formulas: docs/fit.md.")
        sys.stdout.write(fit_table(query, options, describe(query), note))
