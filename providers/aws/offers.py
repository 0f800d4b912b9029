"""Live offer data on EC2: the catalog's rows in the configured regions with their GPU counts confirmed
(DescribeInstanceTypes) and spot prices made live per AZ (DescribeSpotPriceHistory, merged by
providers.aws.spot_prices), best effort per region; and the spot price a launched spot instance carries.
Raw boto3 calls, each run through the adapter's one translate-and-retry path (``call``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from providers.base import GpuRequest, Instance, Market, Offer
from providers.catalog import load_catalog, match_offers
from providers.errors import AuthError, InvalidRequestError, ProviderError

from .spot_prices import merge_spot_prices

log = logging.getLogger(__name__)

PROVIDER = "aws"

#: The adapter's translate-and-retry path: runs one raw boto3 call.
Call = Callable[[Callable[[], Any]], Any]


def live_offers(req: GpuRequest, regions: Sequence[str], *, ec2_for: Callable[[str], Any],
                call: Call) -> list[Offer]:
    """Catalog offers in ``regions``, GPU counts confirmed and spot prices made live (``ec2_for(region)`` is
    that region's EC2 client).

    Live data is best effort: a region whose API fails keeps its catalog rows (a quote should not
    fail because one region throttles), but auth errors are raised.
    """
    if req.providers and PROVIDER not in req.providers:
        return []
    wanted = set(regions)
    # Spot prices are replaced per AZ below, so match on markets/region first, price after merging.
    loose = GpuRequest(gpus=req.gpus, count=req.count, nodes=req.nodes, markets=req.markets,
                       providers=(PROVIDER,), regions=req.regions, min_vram_gb=req.min_vram_gb,
                       interconnect=req.interconnect)
    base = [o for o in match_offers(load_catalog().offers, loose) if o.region in wanted]
    base = list(dict.fromkeys(base))  # the shipped catalog repeats some rows
    merged: list[Offer] = []
    for region in sorted({o.region for o in base}):
        rows = [o for o in base if o.region == region]
        types = sorted({o.instance_type for o in rows})
        try:
            ec2 = ec2_for(region)
            counts = gpu_counts(ec2, types, call)
            rows = [o for o in rows if counts.get(o.instance_type, o.gpu_count) == o.gpu_count]
            if Market.SPOT in req.markets:
                rows = merge_spot_prices(rows, spot_history(ec2, types, call))
        except AuthError:
            raise
        except ProviderError as exc:
            log.warning("aws %s: live offer data unavailable, using the catalog: %s", region, exc)
        merged.extend(rows)
    return match_offers(merged, req)


def gpu_counts(ec2: Any, types: list[str], call: Call) -> dict[str, int]:
    """GPUs per instance type, as DescribeInstanceTypes says; empty where the region lacks one of ``types``."""
    try:
        found = call(lambda: ec2.describe_instance_types(InstanceTypes=types)["InstanceTypes"])
    except InvalidRequestError:  # a type this region does not have: skip confirmation, keep the catalog
        return {}
    return {t["InstanceType"]: sum(g.get("Count", 0) for g in t["GpuInfo"]["Gpus"])
            for t in found if t.get("GpuInfo")}


def spot_history(ec2: Any, types: list[str], call: Call) -> list[dict[str, Any]]:
    """This hour's Linux spot price history for ``types``, every page."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)

    def fetch() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for page in ec2.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=types, ProductDescriptions=["Linux/UNIX"], StartTime=start):
            out.extend(page.get("SpotPriceHistory", []))
        return out
    return call(fetch)  # type: ignore[no-any-return]


def with_spot_price(instance: Instance, ec2: Any, call: Call) -> Instance:
    """A spot instance priced at its zone's current spot price (what AWS bills it), from
    DescribeSpotPriceHistory; without an answer the instance carries no price (the offer's is charged)."""
    try:
        history = spot_history(ec2, [instance.instance_type], call)
    except ProviderError as exc:
        log.warning("aws %s: no spot price for %s at launch: %s", instance.region, instance.instance_id, exc)
        return instance
    mine = [h for h in history if instance.zone in (h.get("AvailabilityZone"), h.get("AvailabilityZoneId"))]
    if not mine:
        return instance
    latest = max(mine, key=lambda h: h["Timestamp"])
    return replace(instance, price_hr=float(latest["SpotPrice"]))
