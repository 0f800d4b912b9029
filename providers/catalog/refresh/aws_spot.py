"""Per-zone AWS spot prices from DescribeSpotPriceHistory, with the user's AWS credentials (boto3's chain).

gpuhunt's published AWS catalog has one spot row per region: the cheapest zone's price. Spot prices differ
by zone (and orch launches into a zone), so where orch is configured for AWS this step asks each configured
region for the current price of every GPU type the rows list there, names zones by their AZ id
(``use1-az2``: the same in every account, as the catalog does), and replaces the region's spot row of a
type with one row per zone. Without AWS in orch's config (or without credentials) it is skipped and
gpuhunt's per-region rows stand.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from providers.base import Market, Offer
from providers.catalog.refresh.model import AwsSpotSettings, RefreshContext, SourceError, SourceSkipped, StepResult

PRODUCT = "Linux/UNIX"
TYPES_PER_CALL = 100


def latest_prices(history: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[float, datetime]]:
    """(instance type, AZ name) -> (price, timestamp) of the newest entry for each."""
    latest: dict[tuple[str, str], tuple[float, datetime]] = {}
    for item in history:
        key = (str(item["InstanceType"]), str(item["AvailabilityZone"]))
        when = item["Timestamp"]
        if key not in latest or when > latest[key][1]:
            latest[key] = (float(item["SpotPrice"]), when)
    return latest


def zone_rows(rows: list[Offer], region: str, prices: dict[tuple[str, str], tuple[float, datetime]],
              zone_ids: dict[str, str], ctx: RefreshContext) -> list[Offer]:
    """A spot row per (type, zone) priced, shaped after the type's on-demand row in ``region``."""
    shapes = {o.instance_type: o for o in rows if o.region == region and o.market is Market.ON_DEMAND}
    out: list[Offer] = []
    for (itype, az), (price, _) in sorted(prices.items()):
        shape = shapes.get(itype)
        if shape is None or price <= 0:
            continue
        out.append(replace(shape, zone=zone_ids.get(az, az), market=Market.SPOT, price_hr=price,
                           price_as_of=ctx.now.date(), price_as_of_approximate=False, captured_at=ctx.now,
                           price_source="aws spot price history"))
    return out


def _region_prices(session: Any, region: str, types: list[str], settings: AwsSpotSettings
                   ) -> tuple[dict[tuple[str, str], tuple[float, datetime]], dict[str, str]]:
    from botocore.config import Config

    ec2 = session.client("ec2", region_name=region, endpoint_url=settings.endpoint_url,
                         config=Config(connect_timeout=10, read_timeout=30, retries={"max_attempts": 3}))
    zones = ec2.describe_availability_zones()["AvailabilityZones"]
    zone_ids = {z["ZoneName"]: z["ZoneId"] for z in zones if z.get("ZoneId")}
    history: list[dict[str, Any]] = []
    for start in range(0, len(types), TYPES_PER_CALL):
        pages = ec2.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=types[start:start + TYPES_PER_CALL], ProductDescriptions=[PRODUCT],
            StartTime=datetime.now())
        for page in pages:
            history += page.get("SpotPriceHistory", [])
    return latest_prices(history), zone_ids


@dataclass(frozen=True, slots=True)
class AwsZoneSpot:
    name: str = "aws spot price history"

    def run(self, rows: list[Offer], ctx: RefreshContext) -> StepResult:
        settings = ctx.settings.aws_spot
        if settings is None:
            raise SourceSkipped("per-zone spot: aws is not in orch's config (gpuhunt's per-region spot kept)")
        try:
            import boto3
            from botocore.exceptions import BotoCoreError, ClientError
        except ImportError:
            raise SourceSkipped("per-zone spot: boto3 is not installed (pip install 'orch[aws]')") from None
        session = boto3.Session(profile_name=settings.profile)
        if session.get_credentials() is None:
            raise SourceSkipped("per-zone spot: no AWS credentials found (gpuhunt's per-region spot kept)")
        out = list(rows)
        zones = 0
        for region in settings.regions:
            types = sorted({o.instance_type for o in rows if o.region == region and o.market is Market.ON_DEMAND})
            if not types:
                continue
            try:
                prices, zone_ids = _region_prices(session, region, types, settings)
            except (BotoCoreError, ClientError) as exc:
                raise SourceError(f"aws spot price history in {region}: {exc}") from None
            fresh = zone_rows(rows, region, prices, zone_ids, ctx)
            priced = {o.instance_type for o in fresh}
            out = [o for o in out if not (o.region == region and o.market is Market.SPOT
                                          and o.instance_type in priced)] + fresh
            zones += len(fresh)
        return StepResult(out, f"aws spot price history: {zones} per-zone spot rows in "
                               f"{', '.join(settings.regions)}")
