"""Loading the GPU catalog: the snapshot shipped in the package, or a newer one a refresh wrote.

One small interface, ``CatalogSource``, so that later sources (each cloud's pricing API, via
``orch catalog refresh``) plug in without touching the callers. ``load_catalog`` picks the user's cache
file (``$XDG_CACHE_HOME/orch/catalog/offers.csv``) when it exists and is valid, else the shipped one.

Kept to the standard library (csv, json) on purpose: ``orch quote`` loads this on every call.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path
from typing import Protocol

from providers.base import Market, Offer
from providers.gpus import Interconnect

SHIPPED_DIR = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    """Offers plus where they came from. ``as_of`` maps provider -> (date, human note)."""

    offers: tuple[Offer, ...]
    origin: str                                  # "shipped" or a cache path
    source: str                                  # provenance sentence
    as_of: dict[str, tuple[date, str]]
    approximate: bool

    def oldest(self) -> date | None:
        dates = [d for d, _ in self.as_of.values()]
        return min(dates) if dates else None


class CatalogSource(Protocol):
    """Anything that can produce a snapshot. ``load`` raises CatalogError when its data is unusable."""

    def load(self) -> CatalogSnapshot: ...


class CatalogError(Exception):
    pass


_COLUMNS = ("provider", "instance_type", "region", "zone", "gpu", "gpu_count", "vram_gb", "vcpus", "memory_gb",
            "interconnect", "market", "price_hr", "price_as_of", "price_as_of_approximate")


def _read_offers(path: Path) -> tuple[Offer, ...]:
    # Positional parsing with memoised enums and dates: this runs on every `orch quote`.
    markets = {m.value: m for m in Market}
    links = {i.value: i for i in Interconnect}
    dates: dict[str, date] = {}
    offers: list[Offer] = []
    with path.open(newline="") as f:
        reader = csv.reader(f)
        if tuple(next(reader, ())) != _COLUMNS:
            raise ValueError(f"{path}: unexpected columns")
        for (provider, itype, region, zone, gpu, count, vram, vcpus, mem, link, market, price, as_of,
             approx) in reader:
            day = dates.get(as_of) or dates.setdefault(as_of, date.fromisoformat(as_of))
            offers.append(Offer(provider, itype, region, zone or None, gpu, int(count), float(vram), float(vcpus),
                                float(mem), links[link], markets[market], float(price), day, approx == "true"))
    return tuple(offers)


@dataclass(frozen=True, slots=True)
class DirectoryCatalog:
    """A catalog directory holding offers.csv and catalog.json (the shipped one, or a refreshed cache)."""

    directory: Path
    origin: str

    def load(self) -> CatalogSnapshot:
        try:
            meta = json.loads((self.directory / "catalog.json").read_text())
            offers = _read_offers(self.directory / "offers.csv")
            as_of = {p: (date.fromisoformat(v["date"]), v["note"]) for p, v in meta["as_of"].items()}
        except (OSError, ValueError, KeyError) as exc:
            raise CatalogError(f"catalog at {self.directory} is unusable: {exc}") from exc
        return CatalogSnapshot(offers, self.origin, meta["source"], as_of, bool(meta.get("approximate")))


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "orch" / "catalog"


def default_sources() -> list[CatalogSource]:
    """Most preferred first: a refreshed user cache, then the shipped snapshot."""
    sources: list[CatalogSource] = []
    override = os.environ.get("ORCH_CATALOG_DIR")
    if override:
        sources.append(DirectoryCatalog(Path(override), override))
    cached = cache_dir()
    if (cached / "offers.csv").exists():
        sources.append(DirectoryCatalog(cached, str(cached)))
    sources.append(DirectoryCatalog(SHIPPED_DIR, "shipped"))
    return sources


@cache
def load_catalog() -> CatalogSnapshot:
    """The first usable source of ``default_sources``. A broken cache falls back to the shipped data."""
    errors: list[str] = []
    for source in default_sources():
        try:
            return source.load()
        except CatalogError as exc:
            errors.append(str(exc))
    raise CatalogError("; ".join(errors))
