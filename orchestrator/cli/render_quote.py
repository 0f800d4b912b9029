"""The quote table (Rich). Imported only when a table is printed, never for --json."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from orchestrator.quote import QuoteRow
from providers.base import OfferOrigin
from providers.catalog import CatalogSnapshot


def _age(days: int, approximate: bool) -> str:
    text = f"{days}d" if days < 60 else f"{days // 30}mo"
    return f"~{text}" if approximate else text


def print_quote_table(rows: Sequence[QuoteRow], catalog: CatalogSnapshot, nodes: int) -> None:
    console = Console()
    if not console.is_terminal:
        # Piped output (less, grep, a file) must not be cut to 80 columns like a narrow terminal.
        console = Console(width=250)
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col, justify in (
        ("PROVIDER", "left"), ("INSTANCE", "left"), ("REGION/ZONE", "left"), ("GPUS", "left"),
        ("VRAM", "right"), ("vCPU/GPU", "right"), ("RAM/GPU", "right"), ("LINK", "left"),
        ("MARKET", "left"), ("$/H" if nodes == 1 else f"$/H ×{nodes}", "right"), ("$/GPU-H", "right"),
        ("AGE", "right"), ("FLAGS", "left"),
    ):
        table.add_column(col, justify=justify, no_wrap=col != "FLAGS")  # type: ignore[arg-type]
    for r in rows:
        o = r.offer
        place = f"{o.region}/{o.zone}" if o.zone else o.region
        gpus = f"{o.gpu_count}×{o.gpu}" + (f" ×{nodes} nodes" if nodes > 1 else "")
        flags = ",".join(r.flags)
        vcpu = f"{o.vcpus_per_gpu:g}"
        ram = f"{o.memory_gb_per_gpu:.0f}G"
        own = o.source == OfferOrigin.OWN
        table.add_row(
            o.provider, o.instance_type, place, gpus, f"{o.vram_gb:g}G",
            f"[yellow]{vcpu}[/]" if any("vcpu" in f for f in r.flags) else vcpu,
            f"[yellow]{ram}[/]" if any("ram" in f for f in r.flags) else ram,
            o.interconnect.value, "own" if own else o.market.value, f"{r.total_price_hr:.2f}",
            f"{o.price_per_gpu_hr:.2f}",
            "-" if own else "live" if o.source == OfferOrigin.LIVE else _age(r.age_days, o.price_as_of_approximate),
            f"[yellow]{flags}[/]" if flags else "",
        )
    console.print(table)
    own = " · market 'own': your machines from orch's config, at the price set there" if any(
        r.offer.source == OfferOrigin.OWN for r in rows) else ""
    providers = sorted({r.offer.provider for r in rows})
    dates = "; ".join(f"{p} {catalog.as_of[p][0].isoformat()}" for p in providers if p in catalog.as_of)
    origin = "shipped catalog" if catalog.origin == "shipped" else f"catalog {catalog.origin}"
    console.print(
        f"[dim]{len(rows)} offers · prices from the {origin} ({catalog.source}); as of {dates}"
        + (" — approximate dates, list prices" if catalog.approximate else "")
        + ("; rows aged 'live' were priced by the provider's API just now" if any(r.offer.source == "live"
                                                                                  for r in rows) else "; not live")
        + f". Flags: outside 2–4 vCPU and 8–16 GB RAM per GPU{own}.[/]",
        highlight=False,
    )
