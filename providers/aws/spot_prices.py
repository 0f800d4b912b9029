"""Live per-AZ spot prices (DescribeSpotPriceHistory) merged over the catalog's spot offers. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from typing import Any

from providers.base import Market, Offer, OfferOrigin


def merge_spot_prices(catalog: Iterable[Offer], history: Iterable[dict[str, Any]]) -> list[Offer]:
    """Replace catalog spot offers with live per-AZ ones where the spot price history has them.

    ``catalog`` and ``history`` are for ONE region (the history comes from that region's endpoint).
    ``history`` items are describe_spot_price_history entries; the latest per (type, AZ) wins. A catalog
    spot offer with live prices for its (type, region) becomes one live offer per AZ; everything else
    (on-demand rows, types without live prices) passes through unchanged.
    """
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for h in history:
        if not str(h.get("ProductDescription", "")).startswith("Linux/UNIX"):
            continue
        key = (h["InstanceType"], h.get("AvailabilityZoneId") or h["AvailabilityZone"])
        if key not in latest or h["Timestamp"] > latest[key]["Timestamp"]:
            latest[key] = h
    out: list[Offer] = []
    replaced: set[tuple[str, str]] = set()
    for offer in catalog:
        live = [h for (itype, _), h in sorted(latest.items()) if itype == offer.instance_type]
        if offer.market is not Market.SPOT or not live:
            out.append(offer)
            continue
        if (offer.instance_type, offer.region) in replaced:
            continue
        replaced.add((offer.instance_type, offer.region))
        for h in live:
            ts = h["Timestamp"]
            out.append(_replace_price(offer, zone=h.get("AvailabilityZoneId") or h["AvailabilityZone"],
                                      price=float(h["SpotPrice"]),
                                      as_of=ts.date() if isinstance(ts, datetime) else date.today()))
    return out


def _replace_price(o: Offer, *, zone: str, price: float, as_of: date) -> Offer:
    return Offer(
        provider=o.provider, instance_type=o.instance_type, region=o.region, zone=zone, gpu=o.gpu,
        gpu_count=o.gpu_count, vram_gb=o.vram_gb, vcpus=o.vcpus, memory_gb=o.memory_gb,
        interconnect=o.interconnect, market=o.market, price_hr=price, price_as_of=as_of,
        price_as_of_approximate=False, source=OfferOrigin.LIVE, availability=o.availability, offer_id=o.offer_id,
    )
