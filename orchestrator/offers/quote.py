"""Quoting: match the catalog to a GpuRequest, price and group the rows, explain an empty answer (the user's
words are checked in ``quote_input.py``, re-exported here).

No SDK, no database: this module must stay cheap to import (``orch quote`` runs it every time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum

from orchestrator.offers.advice import rule_of_thumb_flags
from orchestrator.offers.quote_input import (
    QuoteInputError,
    check_region_glob,
    parse_gpu_specs,
    resolve_gpu_name,
    resolve_gpu_names,
)
from providers.catalog.query import match_offers
from providers.gpus import GPU_MODELS, gpu_by_name
from providers.offer import GpuRequest, Market, Offer, OfferOrigin


class SortKey(StrEnum):
    PRICE = "price"
    PRICE_PER_GPU = "price-per-gpu"


def offer_age(offer: Offer, now: datetime) -> timedelta:
    """How old an offer's price is: from its capture time, else from the start of its (approximate) day."""
    captured = offer.captured_at or datetime.combine(offer.price_as_of, time(), UTC)
    return max(now - captured, timedelta(0))


def format_age(age: timedelta, approximate: bool) -> str:
    """``5m``, ``3h``, ``2d``, ``14mo``; approximate (day-only) ages in days or months, marked ``~``."""
    seconds = age.total_seconds()
    days = int(seconds // 86400)
    if approximate:
        return f"~{days}d" if days < 60 else f"~{days // 30}mo"
    if seconds < 60:
        return "<1m"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 48 * 3600:
        return f"{int(seconds // 3600)}h"
    return f"{days}d" if days < 60 else f"{days // 30}mo"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


@dataclass(frozen=True, slots=True)
class QuoteRow:
    """One line of a quote: an offer, priced for the whole request (``nodes`` machines)."""

    offer: Offer
    nodes: int
    flags: tuple[str, ...]
    age: timedelta

    @property
    def total_price_hr(self) -> float:
        return self.offer.price_hr * self.nodes

    @property
    def age_days(self) -> int:
        return self.age.days

    @property
    def age_text(self) -> str:
        if self.offer.source is OfferOrigin.LIVE:
            return "live"
        if self.offer.source is OfferOrigin.OWN:
            return "-"            # your machine: a price you set, not a market's
        return format_age(self.age, self.offer.captured_at is None)

    def to_json(self) -> dict[str, object]:
        o = self.offer
        return {
            "provider": o.provider,
            "instance_type": o.instance_type,
            "region": o.region,
            "zone": o.zone,
            "gpu": o.gpu,
            "gpu_count": o.gpu_count,
            "nodes": self.nodes,
            "total_gpus": o.gpu_count * self.nodes,
            "vram_gb": o.vram_gb,
            "vcpus": o.vcpus,
            "memory_gb": o.memory_gb,
            "vcpus_per_gpu": _round(o.vcpus_per_gpu),
            "memory_gb_per_gpu": _round(o.memory_gb_per_gpu),
            "interconnect": o.interconnect.value,
            "market": o.market.value,
            "price_hr": round(o.price_hr, 6),
            "total_price_hr": round(self.total_price_hr, 6),
            "price_per_gpu_hr": round(o.price_per_gpu_hr, 6),
            "price_as_of": o.price_as_of.isoformat(),
            "price_as_of_approximate": o.price_as_of_approximate,
            "price_age_days": self.age_days,
            "source": o.source.value,
            "availability": o.availability.value,
            "flags": list(self.flags),
            "price_captured_at": o.captured_at.isoformat() if o.captured_at else None,
            "price_age_s": int(self.age.total_seconds()),
            "price_source": o.price_source,
        }


def _moment(now: datetime | date) -> datetime:
    if isinstance(now, datetime):
        return now if now.tzinfo else now.replace(tzinfo=UTC)
    return datetime.combine(now, time(), UTC)


def _launchable(found: list[Offer], nodes: int) -> list[Offer]:
    """``found`` less, for several nodes, the providers where orch launches single machines only (RunPod, Vast.ai,
    Lambda) and your machines where fewer than ``nodes`` of one kind are free in one place (one host is one node):
    the planner excludes them (``single-node-provider``, ``too-few-machines``), so a quote must not price a gang
    there."""
    if nodes <= 1:
        return found
    from providers.catalog.query import own_machines_free, own_machines_short
    from providers.registry import launches_multi_node  # only here: a one-machine quote stays lean

    free = own_machines_free(found)
    return [o for o in found if launches_multi_node(o.provider) and own_machines_short(o, nodes, free) is None]


def quote(offers: Sequence[Offer], req: GpuRequest, sort: SortKey, limit: int | None,
          now: datetime | date) -> list[QuoteRow]:
    """Matching offers, cheapest first (``now``: the moment ages are measured from; a date means its midnight)."""
    moment = _moment(now)
    found = _launchable(match_offers(offers, req), req.nodes)
    if sort is SortKey.PRICE_PER_GPU:
        found.sort(key=lambda o: (o.price_per_gpu_hr, o.price_hr))
    rows = [QuoteRow(o, req.nodes, tuple(rule_of_thumb_flags(o)), offer_age(o, moment)) for o in found]
    return rows[:limit] if limit else rows


@dataclass(frozen=True, slots=True)
class QuoteGroup:
    """Identical offers across places (same provider, instance type, market, price): one line of the table."""

    rows: tuple[QuoteRow, ...]

    @property
    def first(self) -> QuoteRow:
        return self.rows[0]

    @property
    def oldest(self) -> QuoteRow:
        return max(self.rows, key=lambda r: r.age)

    @property
    def place(self) -> str:
        """The region (and zone) of a single row, ``<region> (3 zones)``, or ``5 regions``."""
        regions = sorted({r.offer.region for r in self.rows})
        if len(regions) > 1:
            return f"{len(regions)} regions"
        zones = sorted({r.offer.zone for r in self.rows if r.offer.zone and r.offer.zone != r.offer.region})
        if len(self.rows) > 1 and len(zones) > 1:
            return f"{regions[0]} ({len(zones)} zones)"
        return f"{regions[0]}/{zones[0]}" if zones else regions[0]


def group_rows(rows: Sequence[QuoteRow], expand: bool = False) -> list[QuoteGroup]:
    """Rows grouped by (provider, instance type, market, price, GPUs), in the order of their first row;
    ``expand`` keeps one group per row (``--all-regions``)."""
    if expand:
        return [QuoteGroup((r,)) for r in rows]
    groups: dict[tuple[object, ...], list[QuoteRow]] = {}
    for r in rows:
        o = r.offer
        key = (o.provider, o.instance_type, o.market, round(o.price_hr, 6), o.gpu, o.gpu_count, o.source)
        groups.setdefault(key, []).append(r)
    return [QuoteGroup(tuple(g)) for g in groups.values()]


def relaxations(offers: Sequence[Offer], req: GpuRequest) -> list[str]:
    """The nearest changes to ``req`` that would match something, most specific first."""
    hints: list[str] = []

    def cheapest(r: GpuRequest) -> Offer | None:
        found = _launchable(match_offers(offers, r), r.nodes)
        return found[0] if found else None

    def with_(**changes: object) -> GpuRequest:
        fields = {f: getattr(req, f) for f in req.__dataclass_fields__}
        fields.update(changes)
        return GpuRequest(**fields)  # type: ignore[arg-type]

    if req.nodes > 1:
        single = match_offers(offers, req)   # the offers only a single-machine provider has
        if single:
            o = single[0]
            hints.append(f"--nodes 1: from ${o.price_hr:.2f}/h ({o.provider} {o.instance_type}: single machines only)")

    counts = sorted({o.gpu_count for o in offers if not req.gpus or o.gpu in req.gpus})
    near_counts = sorted((c for c in counts if c != req.count), key=lambda c: (abs(c - req.count), c))
    for c in near_counts[:3]:
        o = cheapest(with_(count=c))
        if o:
            hints.append(f"--count {c}: from ${o.price_hr * req.nodes:.2f}/h ({o.provider} {o.instance_type})")
    if req.gpus:
        need = min(gpu_by_name(g).vram_gb for g in req.gpus)
        others = [m.name for m in GPU_MODELS if m.name not in req.gpus and m.vram_gb >= need]
        alts = []
        for g in others:
            o = cheapest(with_(gpus=(g,)))
            if o:
                alts.append((o.price_hr, g, o))
        for price, g, o in sorted(alts)[:3]:
            hints.append(f"--gpu {g}: from ${price * req.nodes:.2f}/h ({o.provider} {o.instance_type})")
    if req.markets != frozenset(Market):
        o = cheapest(with_(markets=frozenset(Market)))
        if o:
            hints.append(f"both markets (drop --spot/--on-demand): from ${o.price_hr * req.nodes:.2f}/h")
    if req.max_price_hr is not None:
        o = cheapest(with_(max_price_hr=None))
        if o:
            hints.append(f"--max-price {o.price_hr * req.nodes:.2f} or more ({o.provider} {o.instance_type})")
    for name, change in (("--region", {"regions": ()}), ("--provider", {"providers": ()}),
                         ("--interconnect", {"interconnect": None}), ("--min-vram", {"min_vram_gb": None})):
        current = getattr(req, next(iter(change)))
        if current:
            o = cheapest(with_(**change))
            if o:
                hints.append(f"without {name}: from ${o.price_hr * req.nodes:.2f}/h ({o.provider} {o.region})")
    return hints


__all__ = ["QuoteGroup", "QuoteInputError", "QuoteRow", "SortKey", "check_region_glob", "format_age", "group_rows",
           "offer_age", "parse_gpu_specs", "quote", "relaxations", "resolve_gpu_name", "resolve_gpu_names"]
