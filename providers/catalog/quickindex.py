"""A compact prebuilt index of the loaded catalog, for ``orch quote``.

``load_catalog`` merges the shipped snapshot and the user catalog (parsing CSV, choosing the newest row per offer
key) on every call. The index stores the *result* of that merge, per single-GPU query and for the whole catalog,
so a quote decodes only the rows it prints, and, for the GPU list (``orch quote`` with no ``--gpu``), the whole
catalog's offer groups (``providers.catalog.groups``: per GPU and count, the cheapest row, its providers, how
many), so the list decodes a few dozen rows, not every one. It is derived data: it lives in orch's cache directory
(``$XDG_CACHE_HOME/orch``, else ``~/.cache/orch``), ``orch catalog refresh`` rebuilds it, and a quote that
finds it missing or stale builds it after answering from the full read (so a fresh install has one after its
first quote).

Staleness: the index records, for every source file (the shipped ``offers.csv`` and ``catalog.json``, each
user ``offers-<provider>.csv``), its path, size, modification time and SHA-256. A reader first compares the
stat signature (no file is read); where that differs (an install rewrites mtimes) it compares the content
hashes; any other difference (a file added, removed or changed) makes it stale, and the caller falls back to
the full read. Only the default sources are indexed: a pinned ``$ORCH_CATALOG_DIR`` is always read in full.

The rows are stored as plain JSON values and rebuilt into ``Offer``; the builder checks every row round-trips
exactly and writes no index otherwise, so a quote from the index prints the same bytes as a full read.
Standard library only: ``orch quote`` runs this on every call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

from providers.catalog.groups import OfferGroup, catalog_groups
from providers.catalog.snapshot import SHIPPED_DIR, CatalogSnapshot, _user_files
from providers.gpus import GPU_MODELS, Interconnect
from providers.offer import Market, Offer

#: Bump when the stored shape, or what the loader computes from the same files, changes.
FORMAT = 2
MAGIC = b"#orch-quote-index 2 "
#: The key of the whole catalog's section (``load_catalog()`` with no GPU).
ALL = "*"
#: The key of the GPU list's section: the whole catalog's offer groups (``providers.catalog.groups``).
GROUPS = "*groups"

TYPE_CHECKING = False  # not typing's: `orch quote` imports this module, and typing costs it ~3 ms

if TYPE_CHECKING:
    from typing import Any

_MARKETS = {m.value: m for m in Market}
_LINKS = {i.value: i for i in Interconnect}

Signature = list[list[object]]   # [[path, size, mtime_ns], ...]


def index_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "orch" / f"quote-index-{FORMAT}.bin"


def source_files(user_dir: Path) -> list[Path]:
    """Every file the default sources read, in a fixed order (a missing user directory adds none)."""
    return [SHIPPED_DIR / "offers.csv", SHIPPED_DIR / "catalog.json", *_user_files(user_dir).values()]


def _stats(files: Iterable[Path]) -> Signature | None:
    out: Signature = []
    for p in files:
        try:
            st = os.stat(p)
        except OSError:
            return None
        out.append([str(p), st.st_size, st.st_mtime_ns])
    return out


def _digests(files: Iterable[Path]) -> list[list[str]] | None:
    import hashlib  # only when the stat signature differs

    out: list[list[str]] = []
    for p in files:
        try:
            out.append([str(p), hashlib.sha256(p.read_bytes()).hexdigest()])
        except OSError:
            return None
    return out


def _encode(o: Offer) -> list[object]:
    return [o.provider, o.instance_type, o.region, o.zone, o.gpu, o.gpu_count, o.vram_gb, o.vcpus, o.memory_gb,
            o.interconnect.value, o.market.value, o.price_hr, o.price_as_of.isoformat(), o.price_as_of_approximate,
            o.captured_at.isoformat() if o.captured_at else None, o.price_source]


def _decode(v: list) -> Offer:  # type: ignore[type-arg]
    return Offer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], _LINKS[v[9]], _MARKETS[v[10]], v[11],
                 date.fromisoformat(v[12]), v[13], captured_at=datetime.fromisoformat(v[14]) if v[14] else None,
                 price_source=v[15])


def _encode_snapshot(s: CatalogSnapshot) -> dict[str, object]:
    return {"offers": [_encode(o) for o in s.offers], "origin": s.origin, "source": s.source,
            "as_of": {p: [d.isoformat(), note] for p, (d, note) in s.as_of.items()},
            "approximate": s.approximate, "refreshed": list(s.refreshed), "problems": list(s.problems)}


def _decode_snapshot(d: dict) -> CatalogSnapshot:  # type: ignore[type-arg]
    return CatalogSnapshot(tuple(_decode(v) for v in d["offers"]), d["origin"], d["source"],
                           {p: (date.fromisoformat(day), note) for p, (day, note) in d["as_of"].items()},
                           d["approximate"], tuple(d["refreshed"]), tuple(d["problems"]))


def _encode_groups(snapshot: CatalogSnapshot, groups: list[OfferGroup]) -> dict[str, object]:
    return {"refreshed": list(snapshot.refreshed),
            "groups": [[_encode(g.cheapest), sorted(g.providers), g.offers] for g in groups]}


def build(load: Callable[[frozenset[str] | None], CatalogSnapshot], user_dir: Path,
          path: Path | None = None) -> bool:
    """Write the index of what ``load`` (the default sources' loader) returns for every single GPU and for the
    whole catalog. Returns False, writing nothing, when the files changed while it read, when a row would not
    round-trip exactly, or when the cache directory cannot be written."""
    from providers.catalog.fileformat import write_atomic

    target = path or index_path()
    try:
        # An unwritable cache is found before the work, so every quote does not pay for a build it cannot keep.
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    if not os.access(target.parent, os.W_OK):
        return False
    files = source_files(user_dir)
    before = _stats(files)
    digests = _digests(files)
    if before is None or digests is None:
        return False
    whole = load(None)
    snapshots = {ALL: whole}
    # Every GPU orch knows, listed or not: a quote for a GPU no source lists is answered from the index too.
    for gpu in sorted({o.gpu for o in whole.offers} | {m.name for m in GPU_MODELS}):
        snapshots[gpu] = load(frozenset({gpu}))
    if _stats(source_files(user_dir)) != before:
        return False
    sections: dict[str, list[int]] = {}
    body = bytearray()
    for key, snap in snapshots.items():
        if any(_decode(_encode(o)) != o for o in snap.offers):
            return False
        blob = json.dumps(_encode_snapshot(snap), separators=(",", ":")).encode()
        sections[key] = [len(body), len(blob)]
        body += blob
    groups = catalog_groups(whole.offers)
    if groups is not None:   # else the GPU list groups the whole catalog's rows (the "*" section)
        blob = json.dumps(_encode_groups(whole, groups), separators=(",", ":")).encode()
        sections[GROUPS] = [len(body), len(blob)]
        body += blob
    header = json.dumps({"stats": before, "sha256": digests, "sections": sections}, separators=(",", ":"))
    try:
        write_atomic(target, MAGIC + header.encode() + b"\n" + bytes(body))
    except OSError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Lookup:
    """``snapshot``: the answer, or None (read in full). ``rebuild``: the index is missing, stale, or fresh only
    by content hash (its stat signature should be rewritten)."""

    snapshot: CatalogSnapshot | None
    rebuild: bool


def lookup(gpus: frozenset[str] | None, user_dir: Path, path: Path | None = None) -> Lookup:
    """What ``load_catalog`` would return for ``gpus`` (one GPU, or None for all), from a fresh index. No
    snapshot for several GPUs (not indexed) or a GPU the index does not name (no source lists it)."""
    if gpus is not None and len(gpus) != 1:
        return Lookup(None, False)
    found, rebuild = _section(ALL if gpus is None else next(iter(gpus)), user_dir, path)
    try:
        return Lookup(None if found is None else _decode_snapshot(found), rebuild)
    except (ValueError, KeyError, TypeError, IndexError):
        return Lookup(None, True)


@dataclass(frozen=True, slots=True)
class GroupsLookup:
    """The GPU list's groups of the whole catalog (None: not in a fresh index) and the providers priced from a
    refresh. ``rebuild``: as ``Lookup``'s."""

    groups: list[OfferGroup] | None
    refreshed: tuple[str, ...]
    rebuild: bool


def lookup_groups(user_dir: Path, path: Path | None = None) -> GroupsLookup:
    """The whole catalog's offer groups (``groups.catalog_groups``), from a fresh index."""
    found, rebuild = _section(GROUPS, user_dir, path)
    try:
        if found is None:
            return GroupsLookup(None, (), rebuild)
        groups = [OfferGroup((o := _decode(v)).gpu, o.gpu_count, o, frozenset(providers), n)
                  for v, providers, n in found["groups"]]
        return GroupsLookup(groups, tuple(found["refreshed"]), rebuild)
    except (ValueError, KeyError, TypeError, IndexError):
        return GroupsLookup(None, (), True)


def _section(key: str, user_dir: Path, path: Path | None) -> tuple[Any, bool]:
    """Section ``key``'s JSON value of a fresh index (None: no index, a stale or damaged one, or no such
    section), and whether the index should be rebuilt (missing, stale, or fresh only by content hash)."""
    files = source_files(user_dir)
    try:
        with (path or index_path()).open("rb") as f:
            first = f.readline()
            if not first.startswith(MAGIC):
                return None, True
            header = json.loads(first[len(MAGIC):])
            rehashed = header["stats"] != _stats(files)
            if rehashed and header["sha256"] != _digests(files):
                return None, True
            where = header["sections"].get(key)
            if where is None:
                return None, rehashed
            f.seek(f.tell() + where[0])
            return json.loads(f.read(where[1])), rehashed
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None, True
