"""The ``orch fit`` table, plain text within 80 columns (no Rich: this prints on every call)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from orchestrator.fit.search import FitOption, FitQuery, LinkAdvice, link_text
from providers.offer import Market

WIDTH = 80
_COLUMNS = (("GPU", 14, "<"), ("GPUS", 5, "<"), ("GB/GPU", 10, ">"), ("SHARD", 5, "<"), ("LINK", 7, "<"),
            ("CHEAPEST OFFER", 16, "<"), ("$/H", 7, ">"), ("$ EST", 8, ">"))


def _row(cells: Sequence[str]) -> str:
    return " ".join(f"{c:{align}{width}}" for c, (_, width, align) in zip(cells, _COLUMNS, strict=True)).rstrip()


def _offer_cell(o: FitOption) -> str:
    if o.offer is None:      # the GPU may be in the catalog, only not in machines of this many
        return f"no {o.count}x offer"
    market = "spot" if o.offer.market is Market.SPOT else "on-dem"
    return f"{o.offer.provider} {market}"[:16]


def _gpus_cell(o: FitOption) -> str:
    return f"{o.count}x{o.nodes}" if o.nodes > 1 else str(o.count)


def fit_table(q: FitQuery, options: Sequence[FitOption], header: str, price_note: str) -> str:
    lines = textwrap.wrap(header, WIDTH)
    lines.append(_row([c for c, _, _ in _COLUMNS]))
    fitting = [o for o in options if o.fits]
    for o in fitting:
        cost = f"{o.cost_usd:,.0f}" if o.cost_usd is not None else "-"
        price = f"{o.price_hr:.2f}" if o.price_hr is not None else "-"
        lines.append(_row([o.gpu.name, _gpus_cell(o), f"{o.per_gpu_gb:.1f}/{o.usable_gb:.0f}", o.sharding.value,
                           link_text(o), _offer_cell(o), price, cost]))
    # "does not fit" is said only of memory; a GPU that cannot compute in the asked precision is another matter.
    too_small = [o.gpu.name for o in options if not o.fits and not o.reason.startswith("no ")]
    if too_small:
        lines += textwrap.wrap(f"does not fit (memory): {', '.join(too_small)}", WIDTH, subsequent_indent="  ")
    cannot: dict[str, list[str]] = {}
    for o in options:
        if not o.fits and o.reason.startswith("no "):
            cannot.setdefault(o.reason.split(" (")[0].replace(f" on {o.gpu.name}", ""), []).append(o.gpu.name)
    if cannot:
        text = "; ".join(f"{', '.join(names)} ({reason})" for reason, names in cannot.items())
        lines += textwrap.wrap(f"cannot run the asked precision: {text}", WIDTH, subsequent_indent="  ")
    notes = ["GB/GPU: estimated need / usable (memory less "
             f"{q.headroom:.0%} headroom). GPUS: per machine, x machines."]
    if any(o.link is LinkAdvice.NVLINK for o in fitting):
        notes.append("LINK: the machine's interconnect (the catalog's, per instance type). Sharded over more than "
                     "2 GPUs, weights are gathered every layer: NVLink helps; plain data parallelism all-reduces "
                     "gradients once a step: PCIe is fine.")
    # A note is said once, with the GPUs it is about unless it names them ("no NVLink machine in the catalog"
    # was true of some rows only, while others showed nvlink).
    about: dict[str, list[str]] = {}
    for o in fitting:
        for n in o.notes:
            about.setdefault(n, []).append(o.gpu.name)
    notes += sorted(n if any(g in n for g in gpus) else f"{n}: {', '.join(gpus)}" for n, gpus in about.items())
    notes.append(price_note)
    for n in notes:
        lines += textwrap.wrap(n, WIDTH, subsequent_indent="  ")
    return "\n".join(lines) + "\n"
