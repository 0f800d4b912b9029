"""The quote tables, as plain text fitted to the terminal (like ``kubectl get`` vs ``-o wide``).

Fitting never cuts a price: columns are dropped in a fixed order (the GPUS column when every row has the same
machine shape, then FLAGS), then the instance type and the place are shortened with an ellipsis, and only
then is the instance type dropped. ``--wide`` shows every column, uncut. Output to a pipe (no terminal, no
``$COLUMNS``) is not cut either.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from orchestrator.words import plural
from providers.catalog import CatalogSnapshot
from providers.offer import Offer, OfferOrigin

TYPE_CHECKING = False  # not typing's: `orch quote` imports this module, and typing costs it ~3 ms

if TYPE_CHECKING:
    from typing import Any

    from orchestrator.offers.gpu_list import GpuSummary
    from orchestrator.offers.quote import QuoteGroup, QuoteRow

STALE_AFTER = timedelta(days=1)
GAP = "  "


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table: its header, how a line's item reads in it, how it aligns and shrinks."""

    header: str
    cell: Callable[[Any], str]           # one table line's item (a QuoteGroup, a GpuSummary) -> its text
    right: bool = False
    min_width: int | None = None        # shrinkable down to this (with an ellipsis); None: never cut


def output_width() -> int | None:
    """``$COLUMNS``, else the terminal's width; None (no limit) when writing to a pipe or a file."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if sys.stdout.isatty():
        import shutil  # only for a terminal: a quote into a pipe or a file does without it

        return shutil.get_terminal_size().columns
    return None


def _spec(value: float | None, fmt: str) -> str:
    return "?" if value is None else format(value, fmt)


def _flags(g: QuoteGroup) -> str:
    short = {"low-vcpu-per-gpu": "low-cpu", "low-ram-per-gpu": "low-ram"}
    return ",".join(short.get(f, f) for f in g.first.flags)


def _columns(nodes: int, wide: bool) -> list[Column]:
    price = "$/H" if nodes == 1 else f"$/H×{nodes}"
    place = Column("REGION", lambda g: g.place, min_width=9)
    cols = [
        Column("PROVIDER", lambda g: g.first.offer.provider),
        Column("INSTANCE", lambda g: g.first.offer.instance_type, min_width=12),
        place,
        Column("GPUS", lambda g: f"{g.first.offer.gpu_count}×{g.first.offer.gpu}"),
        Column("MARKET", lambda g: "own" if g.first.offer.source is OfferOrigin.OWN else g.first.offer.market.value),
        Column(price, lambda g: f"{g.first.total_price_hr:.2f}", right=True),
        Column("$/GPU-H", lambda g: f"{g.first.offer.price_per_gpu_hr:.2f}", right=True),
        Column("AGE", lambda g: g.oldest.age_text, right=True),
    ]
    if wide:
        from providers.fabric import fabric_label

        def o(g: QuoteGroup) -> Offer:
            return g.first.offer

        cols += [
            Column("VRAM", lambda g: f"{o(g).vram_gb:g}G", right=True),
            Column("vCPU/GPU", lambda g: _spec(o(g).vcpus_per_gpu, "g"), right=True),
            Column("RAM/GPU", lambda g: _spec(o(g).memory_gb_per_gpu, ".0f") + ("" if o(g).memory_gb is None else "G"),
                   right=True),
            Column("LINK", lambda g: o(g).interconnect.value),
            Column("FABRIC", lambda g: fabric_label(o(g).provider, o(g).instance_type, nodes)),
            Column("SOURCE", lambda g: o(g).price_source or o(g).source),
        ]
    cols.append(Column("FLAGS", _flags))
    return cols


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def fit(columns: list[Column], cells: list[list[str]], width: int | None, droppable: list[str]
        ) -> tuple[list[Column], list[int]]:
    """The columns to show and their widths, within ``width`` (None: no limit)."""
    def natural(i: int) -> int:
        return max([len(columns[i].header)] + [len(row[i]) for row in cells])

    shown = list(range(len(columns)))
    widths = {i: natural(i) for i in shown}
    total = lambda: sum(widths[i] for i in shown) + len(GAP) * (len(shown) - 1)  # noqa: E731
    if width is not None:
        for name in droppable:
            if total() <= width:
                break
            shown = [i for i in shown if columns[i].header != name]
        for i in shown:
            floor = columns[i].min_width
            if floor is not None and total() > width:
                widths[i] = max(floor, widths[i] - (total() - width))
        if total() > width:
            shown = [i for i in shown if columns[i].header != "INSTANCE"]
    return [columns[i] for i in shown], [widths[i] for i in shown]


def render_table(columns: list[Column], widths: list[int], rows: list[list[str]]) -> list[str]:
    lines = []
    for row in [[c.header for c in columns], *rows]:
        parts = [(_cut(v, w).rjust(w) if c.right else _cut(v, w).ljust(w)) for c, v, w in zip(columns, row, widths,
                                                                                          strict=True)]
        lines.append(GAP.join(parts).rstrip())
    return lines


def _wrap(text: str, width: int | None) -> list[str]:
    if not width:
        return [text]
    import textwrap  # only with a width: a quote into a pipe or a file wraps nothing

    return textwrap.wrap(text, width=width, break_on_hyphens=False)


def quote_footer(rows: Sequence[QuoteRow], groups: int, catalog: CatalogSnapshot, flagged: bool) -> list[str]:
    """What the prices are and how old: refreshed vs shipped, providers older than a day, how to refresh."""
    notes: list[str] = []
    shown = len(rows)
    grouped = f" ({shown} across places; --all-regions lists each)" if groups < shown else ""
    notes.append(f"{plural(groups, 'offer')}{grouped}.")
    oldest: dict[str, QuoteRow] = {}
    for r in rows:
        if r.offer.source in (OfferOrigin.LIVE, OfferOrigin.OWN):
            continue
        if r.offer.provider not in oldest or r.age > oldest[r.offer.provider].age:
            oldest[r.offer.provider] = r
    refreshed = sorted(p for p in oldest if p in catalog.refreshed)
    shipped = sorted(p for p in oldest if p not in catalog.refreshed)
    if refreshed:
        notes.append(f"Refreshed prices: {', '.join(refreshed)}.")
    if shipped:
        notes.append(f"Shipped list prices (approximate dates, not live): {', '.join(shipped)}.")
    stale = [f"{p} ({oldest[p].age_text})" for p in sorted(oldest) if oldest[p].age > STALE_AFTER]
    if stale:
        notes.append(f"Older than a day: {', '.join(stale)}; run `orch catalog refresh` (or --live).")
    if any(r.offer.source is OfferOrigin.LIVE for r in rows):
        notes.append("AGE 'live': priced by the provider's API just now.")
    if any(r.offer.source is OfferOrigin.OWN for r in rows):
        notes.append("MARKET 'own': your machines from orch's config, at the price set there.")
    if flagged:
        notes.append("FLAGS: fewer than 2 vCPU (low-cpu) or 8 GB RAM (low-ram) per GPU.")
    notes.extend(f"note: {p}" for p in catalog.problems)
    return notes


def print_quote_table(rows: Sequence[QuoteRow], catalog: CatalogSnapshot, nodes: int, *, wide: bool = False,
                      all_regions: bool = False, width: int | None = None, title: str = "") -> None:
    from orchestrator.offers.quote import group_rows

    width = output_width() if width is None else width
    groups = group_rows(rows, expand=all_regions)
    columns = _columns(nodes, wide)
    cells = [[c.cell(g) for c in columns] for g in groups]
    same_shape = len({(r.offer.gpu, r.offer.gpu_count) for r in rows}) == 1
    droppable = (["GPUS"] if same_shape else []) + ["FLAGS", "GPUS"]
    shown, widths = fit(columns, cells, None if wide else width, droppable)
    index = [columns.index(c) for c in shown]
    out = sys.stdout
    for line in _wrap(title, width) if title else []:
        out.write(line + "\n")
    for line in render_table(shown, widths, [[row[i] for i in index] for row in cells]):
        out.write(line + "\n")
    flagged = any(r.flags for r in rows)
    for note in quote_footer(rows, len(groups), catalog, flagged and "FLAGS" in [c.header for c in shown]):
        for line in _wrap(note, width):
            out.write(line + "\n")
    if flagged and "FLAGS" not in [c.header for c in shown]:
        for line in _wrap(f"{sum(1 for r in rows if r.flags)} offers have fewer than 2 vCPU or 8 GB RAM per GPU "
                          "(--wide shows which).", width):
            out.write(line + "\n")


def print_gpu_list(summaries: Sequence[GpuSummary], refreshed: Sequence[str], *, width: int | None = None) -> None:
    """``orch quote`` with no --gpu: one line per GPU, cheapest $/GPU-hour first (like ``sky gpus list``);
    ``refreshed``: the providers priced from a refresh."""
    width = output_width() if width is None else width
    columns = [
        Column("GPU", lambda s: s.gpu),
        Column("VRAM", lambda s: f"{s.vram_gb}G", right=True),
        Column("FROM $/GPU-H", lambda s: f"{s.cheapest_per_gpu_hr:.2f}", right=True),
        # As the quote's table says it: a machine of yours is "own", not on-demand.
        Column("MARKET", lambda s: "own" if s.cheapest.source is OfferOrigin.OWN else s.cheapest.market.value),
        Column("COUNTS", lambda s: ",".join(map(str, s.counts)), min_width=5),
        Column("PROVIDERS", lambda s: ",".join(s.providers), min_width=10),
    ]
    cells = [[c.cell(s) for c in columns] for s in summaries]
    shown, widths = fit(columns, cells, width, ["COUNTS"])
    index = [columns.index(c) for c in shown]
    for line in render_table(shown, widths, [[row[i] for i in index] for row in cells]):
        sys.stdout.write(line + "\n")
    prices = (f"Refreshed prices: {', '.join(sorted(refreshed))}; shipped list prices for the rest."
              if refreshed else "Shipped list prices (approximate dates): `orch catalog refresh` gets "
              "current ones.")
    for line in _wrap(f"{plural(len(summaries), 'GPU')}. {prices} `orch quote --gpu NAME[:COUNT]` lists the "
                      "offers.", width):
        sys.stdout.write(line + "\n")


def print_history(trends: Sequence[object], gpu: str, *, width: int | None = None) -> None:
    """``orch quote --history --gpu X``: per provider and market, the cheapest $/GPU-hour over the refreshes."""
    from orchestrator.offers.quote import format_age
    from providers.catalog.history import Trend

    width = output_width() if width is None else width
    series = [t for t in trends if isinstance(t, Trend)]
    blocks = "▁▂▃▄▅▆▇█"

    def spark(t: Trend) -> str:
        values = [p.price_per_gpu_hr for p in t.points][-24:]
        lo, hi = min(values), max(values)
        return "".join(blocks[0 if hi == lo else int((v - lo) / (hi - lo) * (len(blocks) - 1))] for v in values)

    def change(t: Trend) -> str:
        return f"{(t.last - t.first) / t.first * 100:+.0f}%" if t.first else "-"

    rows = [[t.provider, t.market, f"{t.first:.2f}", f"{t.last:.2f}", change(t),
             f"{min(p.price_per_gpu_hr for p in t.points):.2f}", str(len(t.points)),
             format_age(t.points[-1].at - t.points[0].at, False), spark(t)]
            for t in series]
    headers = ["PROVIDER", "MARKET", "FIRST", "LAST", "CHANGE", "MIN", "POINTS", "SPAN", "TREND"]
    columns = [Column(h, lambda _g: "", right=h in ("FIRST", "LAST", "CHANGE", "MIN", "POINTS", "SPAN"),
                      min_width=4 if h == "TREND" else None) for h in headers]
    shown, widths = fit(columns, rows, width, ["SPAN", "POINTS"])
    index = [columns.index(c) for c in shown]
    for line in _wrap(f"{gpu}: cheapest $/GPU-hour per provider and market after each refresh (oldest to newest)",
                      width):
        sys.stdout.write(line + "\n")
    for line in render_table(shown, widths, [[row[i] for i in index] for row in rows]):
        sys.stdout.write(line + "\n")
