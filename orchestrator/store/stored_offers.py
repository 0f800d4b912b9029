"""The Offer an attempt was launched on, rebuilt from its instance row (the catalog's own when it has it)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from orchestrator.store.queries import AttemptColumns
from providers.base import Market, Offer, OfferOrigin
from providers.gpus import Interconnect, gpu_by_name


class OfferBook:
    """Catalog offers by key, and offers already rebuilt (one object per distinct row, not per read)."""

    def __init__(self, catalog: Sequence[Offer] = ()) -> None:
        self._catalog = {o.key: o for o in catalog}
        self._built: dict[tuple[object, ...], Offer] = {}

    def of(self, row: AttemptColumns) -> Offer:
        return self.offer(row.provider, row.instance_type, row.region, row.zone, row.market, row.gpu, row.gpu_count,
                          row.price_hr, row.instance_created_at)

    def offer(self, provider: str, instance_type: str, region: str, zone: str | None, market_s: str, gpu: str,
              gpu_count: int, price_hr: float, created_at: datetime) -> Offer:
        market = Market(market_s)
        known = self._catalog.get((provider, instance_type, region, zone, market))
        if known is not None:
            return known
        key = (provider, instance_type, region, zone, market_s, gpu, gpu_count, price_hr)
        cached = self._built.get(key)
        if cached is not None:
            return cached
        try:
            model = gpu_by_name(gpu)
            vram, link = float(model.vram_gb), model.default_interconnect
        except KeyError:
            vram, link = 0.0, Interconnect.PCIE
        offer = Offer(provider, instance_type, region, zone, gpu, max(gpu_count, 1), vram, 0.0, 0.0, link, market,
                      price_hr, created_at.date(), True, OfferOrigin.STORE)
        self._built[key] = offer
        return offer
