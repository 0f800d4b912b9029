"""RunPod's GPU types as orch's offers: a type's canonical GPU (by id or display name) and the on-demand
``Offer`` for a count of it in one cloud (secure or community). Pure functions on GraphQL gpuTypes items."""

from __future__ import annotations

from typing import Any

from providers.base import Availability, Interconnect, Market, Offer, OfferOrigin
from providers.gpus import GpuModel, UnknownGpuError, resolve_gpu, resolve_offer_gpu

from .errors import PROVIDER
from .settings import CloudType


def gpu_model(g: dict[str, Any]) -> GpuModel | None:
    vram = g.get("memoryInGb")
    for spelling in (g.get("id"), g.get("displayName")):
        if not spelling:
            continue
        try:
            return resolve_gpu(str(spelling), float(vram) if vram else None)
        except UnknownGpuError:
            continue
    # Neither spelling is known: logged (once per name), never silently dropped.
    return resolve_offer_gpu(str(g.get("id") or g.get("displayName") or ""), provider=PROVIDER)


def to_offer(g: dict[str, Any], count: int, cloud: str, today: Any) -> Offer | None:
    secure = cloud == CloudType.SECURE.value
    lowest = g.get("lowestPrice") or {}
    per_gpu = g.get("securePrice" if secure else "communityPrice")
    available = g.get("secureCloud" if secure else "communityCloud")
    max_count = g.get("maxGpuCountSecureCloud" if secure else "maxGpuCountCommunityCloud") or g.get("maxGpuCount")
    if not lowest.get("stockStatus") or not per_gpu or not available:
        return None
    if isinstance(max_count, int) and count > max_count:
        return None
    model = gpu_model(g)
    if model is None:
        return None
    return Offer(
        provider=PROVIDER, instance_type=f"{count}x_{g['id']}_{cloud}", region=str(lowest.get("countryCode") or "any"),
        zone=None, gpu=model.name, gpu_count=count, vram_gb=float(g.get("memoryInGb") or model.vram_gb),
        vcpus=float(lowest.get("minVcpu") or 0), memory_gb=float(lowest.get("minMemory") or 0),
        interconnect=model.default_interconnect if count > 1 else Interconnect.PCIE,
        market=Market.ON_DEMAND, price_hr=round(count * float(per_gpu), 4), price_as_of=today, source=OfferOrigin.LIVE,
        availability=Availability.AVAILABLE, offer_id=str(g["id"]),
    )
