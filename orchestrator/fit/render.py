"""The ``orch fit`` table, plain text within 80 columns (no Rich: this prints on every call)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from orchestrator.fit.search import FitOption, FitQuery, LinkAdvice

WIDTH = 80
_COLUMNS = (("GPU", 14, "<"), ("GPUS", 5, "<"), ("GB/GPU", 10, ">"), ("SHARD", 5, "<"), ("LINK", 7, "<"),
            ("CHEAPEST OFFER", 16, "<"), ("$/H", 7, ">"), ("$ EST", 8, ">"))


def _row(cells: Sequence[str]) -> str:
    return " ".join(f"{c:{align}{width}}" for c, (_, width, align) in zip(cells, _COLUMNS, strict=True)).rstrip()


def _offer_cell(o: FitOption) -> str:
    if o.offer is None:
        return "not in catalog"
    market = "spot" if o.offer.market.value == "spot" else "on-dem"
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
                           o.link.value, _offer_cell(o), price, cost]))
    misfits = [o for o in options if not o.fits]
    if misfits:
        by_reason: dict[str, list[str]] = {}
        for o in misfits:
            reason = o.reason.split(":")[0] if o.reason.startswith("no ") else "too small"
            if o.reason.startswith("no "):
                reason = o.reason.split(" (")[0].replace(f" on {o.gpu.name}", "")
            by_reason.setdefault(reason, []).append(o.gpu.name)
        text = "; ".join(f"{', '.join(names)} ({reason})" for reason, names in by_reason.items())
        lines += textwrap.wrap(f"does not fit: {text}", WIDTH, subsequent_indent="  ")
    notes = ["GB/GPU: estimated need / usable (memory less "
             f"{q.headroom:.0%} headroom). GPUS: per machine, x machines."]
    if any(o.link is LinkAdvice.NVLINK for o in fitting):
        notes.append("LINK nvlink: sharded over more than 2 GPUs, weights are gathered every layer; "
                     "pcie ok: gradients are all-reduced once a step.")
    extra = sorted({n for o in fitting for n in o.notes})
    notes += extra
    notes.append(price_note)
    for n in notes:
        lines += textwrap.wrap(n, WIDTH, subsequent_indent="  ")
    return "\n".join(lines) + "\n"
