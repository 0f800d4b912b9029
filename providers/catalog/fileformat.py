"""The catalog's CSV files: one reader for the shipped file and the refreshed per-provider files, one writer.

Two shapes, told apart by the first line:

* the shipped file (and any hand-made ``$ORCH_CATALOG_DIR``): a plain CSV with ``LEGACY_COLUMNS``;
* a refreshed file (``orch catalog refresh``): a first line ``#orch-catalog 2 {"sections": ...}``, the
  ``COLUMNS`` header, then the rows grouped by GPU. The index gives each GPU's byte range (offset from the
  end of the header line, length), so ``orch quote --gpu X`` reads and parses only X's rows: a refreshed
  catalog of ~10k rows costs a quote what ~300 rows cost (measured in tests/bench/bench_quote.py).

``price_as_of`` holds a date (``2025-12-01``, a day: approximate sources) or a UTC time
(``2026-12-02T10:15:00Z``: when the price was captured). ``vcpus`` / ``memory_gb`` may be empty: unknown.

Standard library only, no pydantic: ``orch quote`` runs this on every call.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable
from datetime import UTC, date, datetime
from pathlib import Path

from providers.base import Market, Offer
from providers.gpus import Interconnect

MAGIC = b"#orch-catalog 2 "

LEGACY_COLUMNS = ("provider", "instance_type", "region", "zone", "gpu", "gpu_count", "vram_gb", "vcpus",
                  "memory_gb", "interconnect", "market", "price_hr", "price_as_of", "price_as_of_approximate")
COLUMNS = (*LEGACY_COLUMNS, "source")

_MARKETS = {m.value: m for m in Market}
_LINKS = {i.value: i for i in Interconnect}


class CatalogFileError(ValueError):
    """A catalog file that cannot be read as a catalog (the message names the file and the line)."""


class _Stamps:
    """Parses ``price_as_of`` values once per distinct text (a refresh stamps thousands of rows alike)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[date, datetime | None]] = {}

    def __call__(self, text: str) -> tuple[date, datetime | None]:
        known = self._seen.get(text)
        if known is None:
            if "T" in text:
                moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
                moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
                known = (moment.date(), moment)
            else:
                known = (date.fromisoformat(text), None)
            self._seen[text] = known
        return known


def format_stamp(offer: Offer) -> str:
    """The ``price_as_of`` text of an offer: its capture time when known, else its day."""
    if offer.captured_at is not None:
        return offer.captured_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return offer.price_as_of.isoformat()


def _number(text: str) -> float | None:
    return float(text) if text else None


def _rows_to_offers(rows: Iterable[list[str]], where: str, stamps: _Stamps, default_source: str,
                    gpus: frozenset[str] | None) -> list[Offer]:
    offers: list[Offer] = []
    for n, row in enumerate(rows, 1):
        if not row:
            continue
        if gpus is not None and row[4] not in gpus:
            continue
        try:
            (provider, itype, region, zone, gpu, count, vram, vcpus, mem, link, market, price, as_of,
             approx) = row[:14]
            day, moment = stamps(as_of)
            value = float(price)
            if not (value > 0 and math.isfinite(value)) or int(count) < 1:
                raise ValueError(f"price {price!r} / gpu_count {count!r} out of range")
            offers.append(Offer(provider, itype, region, zone or None, gpu, int(count), float(vram), _number(vcpus),
                                _number(mem), _LINKS[link], _MARKETS[market], value, day, approx == "true",
                                captured_at=moment, price_source=row[14] if len(row) > 14 else default_source))
        except (ValueError, KeyError) as exc:
            raise CatalogFileError(f"{where}: row {n}: {exc}") from None
    return offers


def read_offers(path: Path, gpus: frozenset[str] | None = None, default_source: str = "") -> list[Offer]:
    """The offers in ``path`` (only those of ``gpus`` when given). Raises OSError or CatalogFileError."""
    stamps = _Stamps()
    with path.open("rb") as f:
        first = f.readline()
        if first.startswith(MAGIC):
            try:
                sections: dict[str, list[int]] = json.loads(first[len(MAGIC):])["sections"]
            except (ValueError, KeyError, TypeError) as exc:
                raise CatalogFileError(f"{path}: bad index line: {exc}") from None
            if tuple(f.readline().decode().rstrip("\r\n").split(",")) != COLUMNS:
                raise CatalogFileError(f"{path}: unexpected columns")
            body = f.tell()
            chunks: list[str] = []
            wanted = sections if gpus is None else {g: sections[g] for g in gpus if g in sections}
            for offset, length in sorted(wanted.values()):
                f.seek(body + offset)
                chunks.append(f.read(length).decode())
            rows = csv.reader(io.StringIO("".join(chunks)))
            return _rows_to_offers(rows, str(path), stamps, default_source, gpus)
        header = tuple(first.decode().rstrip("\r\n").split(","))
        if header not in (LEGACY_COLUMNS, COLUMNS):
            raise CatalogFileError(f"{path}: unexpected columns")
        rows = csv.reader(io.StringIO(f.read().decode()))
        return _rows_to_offers(rows, str(path), stamps, default_source, gpus)


def _price_text(value: float) -> str:
    return repr(round(value, 6))


def _spec_text(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def offer_row(o: Offer) -> list[str]:
    return [o.provider, o.instance_type, o.region, o.zone or "", o.gpu, str(o.gpu_count), f"{o.vram_gb:g}",
            _spec_text(o.vcpus), _spec_text(o.memory_gb), o.interconnect.value, o.market.value,
            _price_text(o.price_hr), format_stamp(o), "true" if o.price_as_of_approximate else "false",
            o.price_source]


def render(offers: Iterable[Offer]) -> bytes:
    """A refreshed catalog file: index line, header, rows grouped by GPU (deterministic order)."""
    ordered = sorted(offers, key=lambda o: (o.gpu, o.gpu_count, o.provider, o.instance_type, o.region,
                                            o.zone or "", o.market.value, o.price_hr))
    sections: dict[str, list[int]] = {}
    body = bytearray()
    start = 0
    for i, o in enumerate(ordered):
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(offer_row(o))
        body += buf.getvalue().encode()
        if i + 1 == len(ordered) or ordered[i + 1].gpu != o.gpu:
            sections[o.gpu] = [start, len(body) - start]
            start = len(body)
    index = MAGIC + json.dumps({"sections": sections}, separators=(",", ":"), sort_keys=True).encode() + b"\n"
    return index + (",".join(COLUMNS) + "\n").encode() + bytes(body)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never a mix."""
    import tempfile  # only a refresh writes; `orch quote` never pays for this import

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
