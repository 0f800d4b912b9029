"""Azure prices gpuhunt's published catalog leaves out, from the Azure Retail Prices API (public, no key).

gpuhunt 0.1.34 publishes only the VM series in its ``AzureProvider.filter`` list, and the ND H100 v5 series
(``Standard_ND96isr_H100_v5``, 8x H100 80GB SXM) is not among them. orch asks the Retail Prices API for the
SKUs in ``RETAIL_SKUS`` (on-demand and Spot, every region), following ``NextPageLink`` page after page.
The API gives prices only: each SKU's shape comes from ``RETAIL_SKUS`` (Azure's size documentation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from providers.base import Market, Offer
from providers.catalog.refresh.http import call_json
from providers.catalog.refresh.model import RefreshContext, SourceError, StepResult
from providers.gpus import Interconnect


@dataclass(frozen=True, slots=True)
class SkuShape:
    gpu: str
    gpu_count: int
    vram_gb: float
    vcpus: float
    memory_gb: float
    interconnect: Interconnect


#: https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ndh100v5-series
RETAIL_SKUS: dict[str, SkuShape] = {
    "Standard_ND96isr_H100_v5": SkuShape("H100-80G", 8, 80.0, 96.0, 1900.0, Interconnect.NVLINK),
}
MAX_PAGES = 50
API_VERSION = "2023-01-01-preview"


def retail_filter(skus: list[str]) -> str:
    names = " or ".join(f"armSkuName eq '{s}'" for s in skus)
    return f"serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and ({names})"


def item_to_offer(item: dict[str, Any], ctx: RefreshContext) -> Offer | None:
    """A row for one Retail Prices item, or None for one orch does not use (Windows, Low Priority, non-USD)."""
    shape = RETAIL_SKUS.get(str(item.get("armSkuName")))
    meter = str(item.get("meterName") or "")
    if shape is None or "Windows" in str(item.get("productName") or "") or "Low Priority" in meter:
        return None
    if item.get("currencyCode", "USD") != "USD" or item.get("unitOfMeasure", "1 Hour") != "1 Hour":
        return None
    try:
        price = float(item["retailPrice"])
        region = str(item["armRegionName"])
    except (KeyError, TypeError, ValueError):
        return None
    if price <= 0 or not region:
        return None
    return Offer(
        provider="azure", instance_type=str(item["armSkuName"]), region=region, zone=None, gpu=shape.gpu,
        gpu_count=shape.gpu_count, vram_gb=shape.vram_gb, vcpus=shape.vcpus, memory_gb=shape.memory_gb,
        interconnect=shape.interconnect, market=Market.SPOT if "Spot" in meter else Market.ON_DEMAND,
        price_hr=price, price_as_of=ctx.now.date(), captured_at=ctx.now, price_source="azure retail prices",
    )


def fetch_items(ctx: RefreshContext) -> list[dict[str, Any]]:
    """Every item of the query, following NextPageLink (an absolute URL) until it is null."""
    url: str | None = ctx.settings.azure_prices_url
    params: dict[str, str] | None = {"api-version": API_VERSION, "$filter": retail_filter(sorted(RETAIL_SKUS))}
    items: list[dict[str, Any]] = []
    for _ in range(MAX_PAGES):
        if url is None:
            return items
        page = call_json(ctx.client, "GET", url, params=params)
        if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
            raise SourceError("azure retail prices: no 'Items' list in the answer")
        items += [i for i in page["Items"] if isinstance(i, dict)]
        url, params = page.get("NextPageLink") or None, None
    raise SourceError(f"azure retail prices: more than {MAX_PAGES} pages")


@dataclass(frozen=True, slots=True)
class AzureRetail:
    """Adds (or replaces) the rows of ``RETAIL_SKUS`` with today's Retail Prices."""

    name: str = "azure retail prices"

    def run(self, rows: list[Offer], ctx: RefreshContext) -> StepResult:
        items = fetch_items(ctx)
        fresh = [o for o in (item_to_offer(i, ctx) for i in items) if o is not None]
        if not fresh:
            raise SourceError(f"azure retail prices: none of {len(items)} items prices {', '.join(RETAIL_SKUS)}")
        keys = {o.key for o in fresh}
        kept = [o for o in rows if o.key not in keys]
        return StepResult(kept + fresh, f"azure retail prices: {len(fresh)} rows for {', '.join(RETAIL_SKUS)}")
