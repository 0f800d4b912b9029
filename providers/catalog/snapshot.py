"""What a catalog read gives (``CatalogSnapshot``) and where its files lie: the shipped snapshot and the user
catalog's per-provider files. Below both the loader and its prebuilt index (quickindex), which each read them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from providers.offer import Offer

__all__ = ["SHIPPED_DIR", "USER_FILE_PREFIX", "CatalogError", "CatalogSnapshot", "_user_files"]

SHIPPED_DIR = Path(__file__).resolve().parent / "data"
#: The refreshed providers' files in the user catalog directory: ``offers-<provider>.csv``.
USER_FILE_PREFIX = "offers-"


class CatalogError(Exception):
    """A catalog that cannot be read (a pinned ``$ORCH_CATALOG_DIR``, or every default source unusable)."""


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    """Offers plus where they came from.

    ``as_of`` maps provider -> (day, human note) for every provider with rows; ``approximate`` is True when
    some provider's rows carry only an estimated day (the shipped ones). ``refreshed`` names the providers
    priced from the user catalog; ``problems`` says which user files were unusable and skipped.
    """

    offers: tuple[Offer, ...]
    origin: str                                  # "shipped", "refreshed" (user over shipped) or a directory
    source: str                                  # provenance sentence
    as_of: dict[str, tuple[date, str]]
    approximate: bool
    refreshed: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default=())

    def oldest(self) -> date | None:
        dates = [d for d, _ in self.as_of.values()]
        return min(dates) if dates else None


def _user_files(directory: Path) -> dict[str, Path]:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return {}
    return {n[len(USER_FILE_PREFIX):-4]: directory / n for n in names
            if n.startswith(USER_FILE_PREFIX) and n.endswith(".csv")}
