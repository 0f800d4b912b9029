"""Lambda's instance types as orch's offers: the ``Offer`` for a type (the GPU resolved from its description,
the local disk converted from GiB), and that offer moved to a region with its availability there. Pure."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from typing import Any

from providers.base import Availability, Interconnect, Market, Offer, OfferOrigin
from providers.gpus import resolve_offer_gpu

from .errors import PROVIDER

GIB_IN_GB = 1.073741824


def to_offer(itype: dict[str, Any], region: str, today: date) -> Offer | None:
    """An Offer for a Lambda instance type, or None for a type orch's GPU registry does not know."""
    specs = itype["specs"]
    gpus = int(specs.get("gpus") or 0)
    if gpus < 1:
        return None
    model = resolve_offer_gpu(itype.get("description") or itype["gpu_description"], provider=PROVIDER)
    if model is None:
        return None
    sxm = "sxm" in str(itype.get("gpu_description", "")).lower()
    storage = specs.get("storage_gib")    # the type's fixed local disk (spec: InstanceTypeSpecs.storage_gib)
    return Offer(
        provider=PROVIDER, instance_type=itype["name"], region=region, zone=None, gpu=model.name,
        gpu_count=gpus, vram_gb=float(model.vram_gb), vcpus=float(specs["vcpus"]),
        memory_gb=float(specs["memory_gib"]),
        interconnect=Interconnect.NVLINK if sxm and gpus > 1 else Interconnect.PCIE,
        market=Market.ON_DEMAND, price_hr=itype["price_cents_per_hour"] / 100, price_as_of=today,
        source=OfferOrigin.LIVE, max_disk_gb=round(float(storage) * GIB_IN_GB, 1) if storage else None,
    )


def in_region(offer: Offer, region: str, availability: Availability) -> Offer:
    """``offer`` in ``region``, with the availability it has there."""
    return replace(offer, region=region, availability=availability)
