"""Vast.ai's live marketplace (``POST /api/v0/bundles/``, public search, no API key): gpuhunt publishes no
Vast archive (it searches Vast live), so orch searches it itself.

Vast offers are single asks on single hosts; the catalog keeps, per GPU model, GPU count, place
(``geolocation``) and market, the cheapest verified, rentable ask, with that machine's real share of it:
``cpu_cores_effective`` vCPUs and the same share of the host's ``cpu_ram`` (MB), so a 1-GPU ask on a
128-core host is not shown with 128 cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from providers.base import Market, Offer
from providers.catalog.refresh.http import call_json
from providers.catalog.refresh.model import RefreshContext, SourceError, StepResult
from providers.gpus import Interconnect, UnknownGpuError, resolve_gpu

#: The disk a launch carries unless its manifest says otherwise (providers.vastai Settings.disk_gb): Vast bills
#: it per hour on top of the machine, so the catalog's price includes it, as the adapter's live prices do.
DISK_GB = 100.0
HOURS_PER_MONTH = 720.0
#: An interruptible is billed at its renter's bid, and a launch bids min_bid x this (providers.vastai Settings
#: bid_markup, offers.spot_bid): a spot row shows that bid, so the catalog quotes what a launch would be billed.
BID_MARKUP = 1.1
SEARCH_LIMIT = 1000


def search_body(market: Market) -> dict[str, Any]:
    return {"rentable": {"eq": True}, "rented": {"eq": False}, "verified": {"eq": True},
            "type": "bid" if market is Market.SPOT else "on-demand", "allocated_storage": DISK_GB,
            "order": [["min_bid" if market is Market.SPOT else "dph_total", "asc"]], "limit": SEARCH_LIMIT}


def machine_share(raw: dict[str, Any]) -> tuple[float | None, float | None]:
    """(vCPUs, GB RAM) the ask rents: its effective cores, and the host's RAM in proportion to them."""
    cores = float(raw.get("cpu_cores") or 0)
    effective = float(raw.get("cpu_cores_effective") or 0)
    ram_mb = float(raw.get("cpu_ram") or 0)
    if effective <= 0:
        return None, None
    memory = round(ram_mb * min(effective / cores, 1.0) / 1024.0, 1) if cores > 0 and ram_mb > 0 else None
    return round(effective, 1), memory


def ask_to_offer(raw: dict[str, Any], market: Market, ctx: RefreshContext) -> Offer | None:
    """A catalog row for one ask, or None for an ask orch cannot sell (unknown GPU, no price)."""
    try:
        vram = float(raw.get("gpu_ram") or 0) / 1024.0
        model = resolve_gpu(str(raw.get("gpu_name") or ""), vram_gb=vram or None)
        count = int(raw.get("num_gpus") or 0)
        base = (max(round(float(raw["min_bid"]) * BID_MARKUP, 4), 0.001) if market is Market.SPOT
                else float(raw["dph_base"]))
        disk = DISK_GB * float(raw.get("storage_cost") or 0.0) / HOURS_PER_MONTH
    except (UnknownGpuError, KeyError, TypeError, ValueError):
        return None
    if count < 1 or base <= 0:
        return None
    vcpus, memory = machine_share(raw)
    gpu_text = str(raw.get("gpu_name")).replace(" ", "_")
    return Offer(
        provider="vastai", instance_type=f"{count}x-{gpu_text}", region=str(raw.get("geolocation") or "unknown"),
        zone=None, gpu=model.name, gpu_count=count, vram_gb=round(vram, 1) or float(model.vram_gb), vcpus=vcpus,
        memory_gb=memory,
        interconnect=Interconnect.NVLINK if count > 1 and float(raw.get("bw_nvlink") or 0) > 0 else Interconnect.PCIE,
        market=market, price_hr=round(base + disk, 6), price_as_of=ctx.now.date(), captured_at=ctx.now,
        price_source="vast bundles",
    )


def cheapest_per_key(offers: list[Offer]) -> list[Offer]:
    best: dict[tuple[object, ...], Offer] = {}
    for o in offers:
        if o.key not in best or o.price_hr < best[o.key].price_hr:
            best[o.key] = o
    return list(best.values())


@dataclass(frozen=True, slots=True)
class VastBundles:
    name: str = "vast bundles"

    def run(self, rows: list[Offer], ctx: RefreshContext) -> StepResult:
        found: list[Offer] = []
        asks = 0
        for market in (Market.ON_DEMAND, Market.SPOT):
            answer = call_json(ctx.client, "POST", ctx.settings.vast_url.rstrip("/") + "/bundles/",
                               json=search_body(market))
            offers = answer.get("offers") if isinstance(answer, dict) else None
            if not isinstance(offers, list):
                raise SourceError("POST /bundles/: no 'offers' list in the answer")
            asks += len(offers)
            found += [o for o in (ask_to_offer(r, market, ctx) for r in offers if isinstance(r, dict)) if o]
        if not found:
            raise SourceError(f"vast bundles: no ask orch can sell among {asks}")
        kept = cheapest_per_key(found)
        return StepResult(kept, f"vast bundles (live search): {len(kept)} rows from {asks} asks")
