"""Vast's asks as orch's offers: the POST /bundles/ search body, Vast's gpu_name spellings, an ask's price
(disk included) and the ``Offer`` made of an ask. Pure functions on the API's ask dicts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

from providers.base import Availability, GpuRequest, Interconnect, Market, Offer, OfferOrigin
from providers.gpus import resolve_offer_gpu

from .errors import PROVIDER
from .instances import vast_instance_type
from .settings import Settings

HOURS_PER_MONTH = 720.0   # storage_cost is $/GB/month; the vast CLI divides by 720 for $/h

#: Vast's gpu_name spellings per canonical GPU, for a server-side gpu_name filter. Names not here are
#: filtered client-side only (resolve_gpu on each offer), so a missing entry costs bandwidth, not results.
VAST_GPU_NAMES: dict[str, tuple[str, ...]] = {
    "B200-180G": ("B200",),
    "H200-141G": ("H200", "H200 NVL"),
    "H100-80G": ("H100 SXM", "H100 PCIE"),
    "H100NVL-94G": ("H100 NVL",),
    "GH200-96G": ("GH200 SXM",),
    "A100-80G": ("A100 SXM4", "A100 PCIE", "A100X"),
    "A100-40G": ("A100 SXM4", "A100 PCIE"),
    "L40S-48G": ("L40S",),
    "L40-48G": ("L40",),
    "L4-24G": ("L4",),
    "A10-24G": ("A10",),
    "RTX4090-24G": ("RTX 4090",),
    "RTXA6000-48G": ("RTX A6000",),
    "RTX5090-32G": ("RTX 5090",),
    "RTX3090-24G": ("RTX 3090",),
    "RTXA5000-24G": ("RTX A5000",),
    "RTXA4000-16G": ("RTX A4000",),
    "RTX6000ADA-48G": ("RTX 6000Ada",),
    "A40-48G": ("A40",),
    "V100-16G": ("Tesla V100",),
    "V100-32G": ("Tesla V100",),
    "T4-16G": ("Tesla T4",),
}


def disk_cost_hr(disk_gb: float, storage_cost: float) -> float:
    """Vast bills disk at ``storage_cost`` $/GB/month; per hour as the vast CLI computes it (/720)."""
    return disk_gb * storage_cost / HOURS_PER_MONTH


def spot_bid(min_bid: float, bid_markup: float) -> float:
    """The interruptible bid orch places on an ask ($/h for the machine, disk excluded): its ``min_bid`` times
    ``bid_markup``. Vast bills an interruptible at the bid its renter set, not at the ask's floor ("you set a bid
    price", docs.vast.ai rental types; PUT /api/v0/asks/{id} ``price``: "Bid price per machine (in $/hour)"), so
    this one figure is both what a spot offer is quoted at and what its launch bids."""
    return max(round(min_bid * bid_markup, 4), 0.001)


def offer_price_hr(raw: dict[str, Any], market: Market, disk_gb: float, *, bid_markup: float) -> float:
    """$/h for an ask as Vast will bill it: on-demand dph_base (spot: the bid orch places, ``spot_bid``) plus the
    disk it will carry."""
    base = spot_bid(float(raw["min_bid"]), bid_markup) if market is Market.SPOT else float(raw["dph_base"])
    return round(base + disk_cost_hr(disk_gb, float(raw.get("storage_cost") or 0.0)), 6)


def search_body(settings: Settings, req: GpuRequest, market: Market, disk_gb: float) -> dict[str, Any]:
    """The POST /bundles/ body for ``req`` in ``market``, asks priced with ``disk_gb`` of disk: the careful
    filters plus what ``req`` pins."""
    s = settings
    body: dict[str, Any] = {
        "rentable": {"eq": s.rentable},
        "rented": {"eq": s.rented},
        "reliability": {"gte": s.min_reliability},
        "num_gpus": {"eq": req.count},
        "type": "bid" if market is Market.SPOT else "on-demand",
        "allocated_storage": disk_gb,
        "order": [["min_bid" if market is Market.SPOT else "dph_total", "asc"]],
        "limit": s.offer_limit,
    }
    if s.verified is not None:
        body["verified"] = {"eq": s.verified}
    if s.min_direct_ports:
        body["direct_port_count"] = {"gte": s.min_direct_ports}
    if s.min_cuda is not None:
        body["cuda_max_good"] = {"gte": s.min_cuda}
    if s.min_inet_down_mbps is not None:
        body["inet_down"] = {"gte": s.min_inet_down_mbps}
    if req.gpus and all(g in VAST_GPU_NAMES for g in req.gpus):
        body["gpu_name"] = {"in": sorted({n for g in req.gpus for n in VAST_GPU_NAMES[g]})}
    if req.min_vram_gb is not None:
        body["gpu_ram"] = {"gte": int(req.min_vram_gb * 1000)}   # MB; 1000 leaves room for 81559-MB H100s
    return body


def to_offer(raw: dict[str, Any], market: Market, disk_gb: float, today: Callable[[], date], *,
             bid_markup: float) -> Offer | None:
    """The ask as an orch ``Offer`` (priced with ``disk_gb`` of disk; spot at the bid a launch places), or None
    for a GPU orch does not sell."""
    vram = float(raw.get("gpu_ram") or 0) / 1024.0
    model = resolve_offer_gpu(str(raw.get("gpu_name") or ""), vram_gb=vram or None, provider=PROVIDER)
    if model is None:
        return None
    n = int(raw.get("num_gpus") or 0)
    if n < 1:
        return None
    return Offer(
        provider=PROVIDER, instance_type=vast_instance_type(raw), region=str(raw.get("geolocation") or "unknown"),
        zone=None, gpu=model.name, gpu_count=n, vram_gb=round(vram, 1),
        vcpus=float(raw.get("cpu_cores_effective") or raw.get("cpu_cores") or 0),
        memory_gb=round(float(raw.get("cpu_ram") or 0) / 1024.0, 1),
        interconnect=Interconnect.NVLINK if float(raw.get("bw_nvlink") or 0) > 0 else Interconnect.PCIE,
        market=market, price_hr=offer_price_hr(raw, market, disk_gb, bid_markup=bid_markup),
        price_as_of=today(), source=OfferOrigin.LIVE, availability=Availability.AVAILABLE,
        offer_id=str(raw["id"]), max_disk_gb=float(raw["disk_space"]) if raw.get("disk_space") else None,
    )
