"""Quoting: turn the user's words into a GpuRequest, match the catalog, explain an empty answer.

No SDK, no database: this module must stay cheap to import (``orch quote`` runs it every time).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from enum import StrEnum

from orchestrator.advice import rule_of_thumb_flags
from providers.base import GpuRequest, Market, Offer
from providers.catalog.query import match_offers
from providers.gpus import GPU_MODELS, Interconnect, gpu_by_name, resolve_gpu


class SortKey(StrEnum):
    PRICE = "price"
    PRICE_PER_GPU = "price-per-gpu"


class QuoteInputError(ValueError):
    """Bad user input; the message names the bad value and the closest valid choices."""


_GLOB_RE = re.compile(r"^[A-Za-z0-9*?\[\]!._-]+$")


def check_region_glob(pattern: str) -> str:
    from orchestrator.redaction import shown

    if not pattern or not _GLOB_RE.fullmatch(pattern) or pattern.count("[") != pattern.count("]"):
        raise QuoteInputError(
            f"malformed region glob {shown(pattern)} (use letters, digits, '-', '*', '?', [..]; e.g. 'us-*')"
        )
    depth = 0
    for ch in pattern:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise QuoteInputError(f"malformed region glob {shown(pattern)} (unbalanced brackets)")
    return pattern


def resolve_gpu_names(names: Sequence[str]) -> tuple[str, ...]:
    """Canonical names for each name or alias; commas separate alternatives inside one value."""
    out: list[str] = []
    for raw in names:
        for part in raw.split(","):
            part = part.strip()
            if part:
                try:
                    canonical = resolve_gpu(part).name
                except ValueError as exc:
                    raise QuoteInputError(str(exc)) from None
                if canonical not in out:
                    out.append(canonical)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class QuoteRow:
    """One line of a quote: an offer, priced for the whole request (``nodes`` machines)."""

    offer: Offer
    nodes: int
    flags: tuple[str, ...]
    age_days: int

    @property
    def total_price_hr(self) -> float:
        return self.offer.price_hr * self.nodes

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
            "vcpus_per_gpu": round(o.vcpus_per_gpu, 2),
            "memory_gb_per_gpu": round(o.memory_gb_per_gpu, 2),
            "interconnect": o.interconnect.value,
            "market": o.market.value,
            "price_hr": round(o.price_hr, 6),
            "total_price_hr": round(self.total_price_hr, 6),
            "price_per_gpu_hr": round(o.price_per_gpu_hr, 6),
            "price_as_of": o.price_as_of.isoformat(),
            "price_as_of_approximate": o.price_as_of_approximate,
            "price_age_days": self.age_days,
            "source": o.source,
            "availability": o.availability.value,
            "flags": list(self.flags),
        }


def quote(offers: Sequence[Offer], req: GpuRequest, sort: SortKey, limit: int | None,
          today: date) -> list[QuoteRow]:
    found = match_offers(offers, req)
    if sort is SortKey.PRICE_PER_GPU:
        found.sort(key=lambda o: (o.price_per_gpu_hr, o.price_hr))
    rows = [
        QuoteRow(o, req.nodes, tuple(rule_of_thumb_flags(o)), (today - o.price_as_of).days)
        for o in found
    ]
    return rows[:limit] if limit else rows


def relaxations(offers: Sequence[Offer], req: GpuRequest) -> list[str]:
    """The nearest changes to ``req`` that would match something, most specific first."""
    hints: list[str] = []

    def cheapest(r: GpuRequest) -> Offer | None:
        found = match_offers(offers, r)
        return found[0] if found else None

    def with_(**changes: object) -> GpuRequest:
        fields = {f: getattr(req, f) for f in req.__dataclass_fields__}
        fields.update(changes)
        return GpuRequest(**fields)  # type: ignore[arg-type]

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


__all__ = ["Interconnect", "QuoteInputError", "QuoteRow", "SortKey", "check_region_glob", "quote",
           "relaxations", "resolve_gpu_names"]
