"""Loading the GPU catalog: the user catalog a refresh wrote, over the snapshot shipped in the package.

Where rows come from, most preferred first:

* ``$ORCH_CATALOG_DIR`` (``offers.csv`` + ``catalog.json``): when set, the only catalog (tests, pinning);
* the user catalog ``<data dir>/orch/catalog/offers-<provider>.csv`` written by ``orch catalog refresh``
  (data dir: ``$XDG_DATA_HOME``, else ``~/.local/share``). A provider with a usable file there is priced
  from it alone: the shipped rows of a refreshed provider are dropped, so a quote never shows a row the
  provider's current price list no longer has beside the fresh ones;
* the shipped snapshot for every other provider.

Across all of them, per offer key (provider, instance type, region, zone, market) the newest row wins, so
the planner and the engine always price from the freshest row. A broken user file falls back to the shipped
rows of that provider (and says so in ``problems``).

Kept to the standard library on purpose: ``orch quote`` loads this on every call.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from functools import cache
from pathlib import Path
from typing import Protocol

from providers.base import Offer
from providers.catalog.snapshot import SHIPPED_DIR, USER_FILE_PREFIX, CatalogSnapshot, _user_files


class CatalogSource(Protocol):
    """Anything that can produce a snapshot. ``load`` raises CatalogError when its data is unusable."""

    def load(self, gpus: frozenset[str] | None = None) -> CatalogSnapshot: ...


class CatalogError(Exception):
    pass


def _stamp(o: Offer) -> datetime:
    """When a row was captured, comparable across exact times and approximate days."""
    return o.captured_at or datetime.combine(o.price_as_of, time(), UTC)


def newest_per_key(offers: list[Offer]) -> list[Offer]:
    """One offer per key: the most recently captured (the first seen on a tie), in first-seen order."""
    best: dict[tuple[object, ...], Offer] = {}
    for o in offers:
        held = best.get(o.key)
        if held is None or _stamp(o) > _stamp(held):
            best[o.key] = o
    return list(best.values())


@dataclass(frozen=True, slots=True)
class DirectoryCatalog:
    """A catalog directory holding offers.csv and catalog.json (the shipped one, or ``$ORCH_CATALOG_DIR``)."""

    directory: Path
    origin: str

    def load(self, gpus: frozenset[str] | None = None) -> CatalogSnapshot:
        # Imported here: a quote answered from the prebuilt index (quickindex) never parses CSV.
        from providers.catalog.fileformat import CatalogFileError, read_offers

        try:
            meta = json.loads((self.directory / "catalog.json").read_text())
            offers = read_offers(self.directory / "offers.csv", gpus, default_source=self.origin)
            as_of = {p: (date.fromisoformat(v["date"]), v["note"]) for p, v in meta["as_of"].items()}
        except (OSError, ValueError, KeyError, TypeError, CatalogFileError) as exc:
            where = "" if self.directory == SHIPPED_DIR else "$ORCH_CATALOG_DIR "
            raise CatalogError(f"catalog at {where}{self.directory} is unusable: {exc}"
                               + (" (it must hold offers.csv and catalog.json; unset it to use orch's own catalog)"
                                  if where else "")) from exc
        return CatalogSnapshot(tuple(newest_per_key(offers)), self.origin, meta["source"], as_of,
                               bool(meta.get("approximate")))


def user_catalog_dir() -> Path:
    """Where ``orch catalog refresh`` writes: ``$XDG_DATA_HOME/orch/catalog`` (orch's data directory)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "orch" / "catalog"


def user_catalog_file(provider: str, directory: Path | None = None) -> Path:
    return (directory or user_catalog_dir()) / f"{USER_FILE_PREFIX}{provider}.csv"


@dataclass(frozen=True, slots=True)
class LayeredCatalog:
    """The user catalog's refreshed providers over the shipped snapshot (see the module docstring)."""

    user_dir: Path
    shipped: DirectoryCatalog

    def load(self, gpus: frozenset[str] | None = None) -> CatalogSnapshot:
        from providers.catalog.fileformat import CatalogFileError, read_offers

        base = self.shipped.load(gpus)
        fresh: list[Offer] = []
        refreshed: list[str] = []
        problems: list[str] = []
        for provider, path in _user_files(self.user_dir).items():
            try:
                rows = read_offers(path, gpus)
            except (OSError, CatalogFileError) as exc:
                problems.append(f"{path} is unusable, using the shipped {provider} rows: {exc}")
                continue
            refreshed.append(provider)
            fresh.extend(rows)
        if not refreshed:
            return CatalogSnapshot(base.offers, base.origin, base.source, base.as_of, base.approximate,
                                   problems=tuple(problems))
        kept = [o for o in base.offers if o.provider not in refreshed]
        offers = newest_per_key(fresh + kept)
        as_of = {p: v for p, v in base.as_of.items() if p not in refreshed}
        for provider in refreshed:
            days = [o.price_as_of for o in fresh if o.provider == provider]
            if days:
                as_of[provider] = (min(days), f"refreshed catalog ({self.user_dir})")
        source = f"refreshed catalog for {', '.join(refreshed)}; shipped list prices for the rest"
        return CatalogSnapshot(tuple(offers), "refreshed", source, as_of,
                               any(o.price_as_of_approximate for o in offers), tuple(refreshed), tuple(problems))


def default_sources() -> list[CatalogSource]:
    """Most preferred first: ``$ORCH_CATALOG_DIR``, then the user catalog over the shipped snapshot."""
    override = os.environ.get("ORCH_CATALOG_DIR")
    if override:
        # The only source: a pinned catalog that cannot be read is an error to fix, never a silent fallback
        # to other prices (the daemon does not refresh a pinned catalog either).
        return [DirectoryCatalog(Path(override), override)]
    shipped = DirectoryCatalog(SHIPPED_DIR, "shipped")
    return [LayeredCatalog(user_catalog_dir(), shipped), shipped]


@cache
def load_catalog(gpus: tuple[str, ...] | None = None, *, build_index: bool = False) -> CatalogSnapshot:
    """The first usable source of ``default_sources``; only the rows of ``gpus`` when given (a quote for one
    GPU reads only that GPU's part of a refreshed catalog). Answered from the prebuilt index
    (``quickindex``) when it is fresh; ``build_index`` (``orch quote``) builds it when it is missing or stale
    (~0.2 s, once per catalog change; ``orch catalog refresh`` builds it too). Cached per process: call
    ``cache_clear()`` after a refresh."""
    wanted = frozenset(gpus) if gpus is not None else None
    if os.environ.get("ORCH_CATALOG_DIR"):
        return _load_sources(wanted)
    from providers.catalog import quickindex

    found = quickindex.lookup(wanted, user_catalog_dir())
    if found.rebuild and build_index:
        rebuild_index()
    return found.snapshot or _load_sources(wanted)


def rebuild_index() -> bool:
    """Rebuild the quote's prebuilt index from the default sources (``orch catalog refresh`` calls it; a stale
    index is rebuilt by the next ``load_catalog``). False when nothing was written (pinned catalog, unreadable
    sources, an unwritable cache)."""
    if os.environ.get("ORCH_CATALOG_DIR"):
        return False
    from providers.catalog import quickindex

    try:
        return quickindex.build(_load_sources, user_catalog_dir())
    except CatalogError:
        return False


def _load_sources(wanted: frozenset[str] | None) -> CatalogSnapshot:
    """The first usable source of ``default_sources``, read in full (no index)."""
    errors: list[str] = []
    for source in default_sources():
        try:
            return source.load(wanted)
        except CatalogError as exc:
            errors.append(str(exc))
    raise CatalogError("; ".join(errors))


def current_price_hr(offer: Offer) -> float:
    """The freshest catalog price of ``offer``'s machine, place and market (the offer's own price when the
    catalog does not list it): what Azure and GCP instances are charged at launch, their APIs reporting none."""
    for o in load_catalog((offer.gpu,)).offers:
        if o.key == offer.key:
            return o.price_hr
    return offer.price_hr
