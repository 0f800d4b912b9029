"""Matching offers against a GpuRequest. Pure functions over values; no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from providers.offer import Availability, GpuRequest, Offer, OfferOrigin


def region_matches(offer: Offer, patterns: tuple[str, ...]) -> bool:
    """A glob matches the region or the zone, case-insensitively (``us-*``, ``*west*``, ``use1-az2``)."""
    if not patterns:
        return True
    places = [offer.region.lower()] + ([offer.zone.lower()] if offer.zone else [])
    return any(fnmatchcase(place, pattern.lower()) for pattern in patterns for place in places)


def offer_matches(offer: Offer, req: GpuRequest) -> bool:
    if req.gpus and offer.gpu not in req.gpus:
        return False
    if offer.gpu_count != req.count:
        return False
    if offer.market not in req.markets:
        return False
    if req.providers and offer.provider not in req.providers:
        return False
    if not region_matches(offer, req.regions):
        return False
    if req.min_vram_gb is not None and offer.vram_gb < req.min_vram_gb:
        return False
    if req.interconnect is not None and offer.interconnect is not req.interconnect:
        return False
    if req.exclude_zones and (offer.zone in req.exclude_zones or offer.region in req.exclude_zones):
        return False
    return req.max_price_hr is None or offer.price_hr * req.nodes <= req.max_price_hr


def match_offers(offers: Iterable[Offer], req: GpuRequest) -> list[Offer]:
    """Offers satisfying every constraint of ``req``, cheapest (whole request) first, ties stable."""
    found = [o for o in offers if offer_matches(o, req)]
    found.sort(key=lambda o: (o.price_hr, o.provider, o.instance_type, o.region, o.zone or ""))
    return found


Site = tuple[str, str, str, int]


def own_machines_free(offers: Iterable[Offer]) -> dict[Site, int]:
    """How many of your machines (``source`` own: one offer per configured host) are free per site: provider,
    region, GPU and GPU count, the places a gang's other nodes may take (orchestrator.engine.gang.site_offers)."""
    free: dict[Site, set[str]] = {}
    for o in offers:
        if o.source is OfferOrigin.OWN and o.availability is not Availability.NOT_AVAILABLE:
            free.setdefault((o.provider, o.region, o.gpu, o.gpu_count), set()).add(o.instance_type)
    return {site: len(hosts) for site, hosts in free.items()}


def own_machines_short(offer: Offer, nodes: int, free: dict[Site, int]) -> int | None:
    """For a job of ``nodes`` machines, how many of your machines of ``offer``'s site are free when that is fewer
    than ``nodes`` (one host is one machine: it cannot be two nodes); None when enough are, or for a cloud's
    offer (a cloud has more machines of a type)."""
    if nodes <= 1 or offer.source is not OfferOrigin.OWN:
        return None
    have = free.get((offer.provider, offer.region, offer.gpu, offer.gpu_count), 0)
    return have if have < nodes else None
