"""The catalog's files as sources: a catalog directory (the shipped snapshot, ``$ORCH_CATALOG_DIR``) and the user
catalog's refreshed providers layered over it, each merged to the newest row per offer key.

Apart from ``loader.py`` (which builds these in ``default_sources``) so that a quote answered from the prebuilt
index (quickindex) does not define them (tests/bench/bench_quote.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from pathlib import Path

from providers.catalog.snapshot import SHIPPED_DIR, CatalogError, CatalogSnapshot, _user_files
from providers.offer import Offer

__all__ = ["DirectoryCatalog", "LayeredCatalog", "newest_per_key"]


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
            raise CatalogError(
                f"catalog at {where}{self.directory} is unusable: {exc}"
                + (" (it must hold offers.csv and catalog.json; unset it to use orch's own catalog)" if where else "")
            ) from exc
        return CatalogSnapshot(
            tuple(newest_per_key(offers)), self.origin, meta["source"], as_of, bool(meta.get("approximate"))
        )


@dataclass(frozen=True, slots=True)
class LayeredCatalog:
    """The user catalog's refreshed providers over the shipped snapshot (loader.py's docstring says which row
    wins)."""

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
            return CatalogSnapshot(
                base.offers, base.origin, base.source, base.as_of, base.approximate, problems=tuple(problems)
            )
        kept = [o for o in base.offers if o.provider not in refreshed]
        offers = newest_per_key(fresh + kept)
        as_of = {p: v for p, v in base.as_of.items() if p not in refreshed}
        for provider in refreshed:
            days = [o.price_as_of for o in fresh if o.provider == provider]
            if days:
                as_of[provider] = (min(days), f"refreshed catalog ({self.user_dir})")
        source = f"refreshed catalog for {', '.join(refreshed)}; shipped list prices for the rest"
        return CatalogSnapshot(
            tuple(offers),
            "refreshed",
            source,
            as_of,
            any(o.price_as_of_approximate for o in offers),
            tuple(refreshed),
            tuple(problems),
        )
