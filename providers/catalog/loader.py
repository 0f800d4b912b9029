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

Kept to the standard library on purpose: ``orch quote`` loads this on every call. The sources themselves (a
directory, the user catalog over it) are in ``layers.py``, imported only when the files are read.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from providers.catalog.snapshot import SHIPPED_DIR, USER_FILE_PREFIX, CatalogError, CatalogSnapshot
from providers.offer import Offer

__all__ = ["SHIPPED_DIR", "CatalogError", "CatalogSnapshot", "current_price_hr", "default_sources", "load_catalog",
           "load_catalog_groups", "rebuild_index", "user_catalog_dir", "user_catalog_file"]

TYPE_CHECKING = False  # not typing's: `orch quote` imports this module, and typing costs it ~3 ms

if TYPE_CHECKING:
    from typing import Protocol

    from providers.catalog import quickindex

    class CatalogSource(Protocol):
        """Anything that can produce a snapshot. ``load`` raises CatalogError when its data is unusable."""

        def load(self, gpus: frozenset[str] | None = None) -> CatalogSnapshot: ...


def user_catalog_dir() -> Path:
    """Where ``orch catalog refresh`` writes: ``$XDG_DATA_HOME/orch/catalog`` (orch's data directory)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "orch" / "catalog"


def user_catalog_file(provider: str, directory: Path | None = None) -> Path:
    return (directory or user_catalog_dir()) / f"{USER_FILE_PREFIX}{provider}.csv"


def default_sources() -> list[CatalogSource]:
    """Most preferred first: ``$ORCH_CATALOG_DIR``, then the user catalog over the shipped snapshot."""
    from providers.catalog.layers import DirectoryCatalog, LayeredCatalog

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


def load_catalog_groups() -> quickindex.GroupsLookup | None:
    """The GPU list's groups of the whole catalog from a fresh prebuilt index; None when the catalog is pinned
    or the index is missing, stale or lacks them (the caller reads ``load_catalog()``, which rebuilds it)."""
    if os.environ.get("ORCH_CATALOG_DIR"):
        return None
    from providers.catalog import quickindex

    found = quickindex.lookup_groups(user_catalog_dir())
    return found if found.groups is not None and not found.rebuild else None


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
