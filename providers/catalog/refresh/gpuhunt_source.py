"""gpuhunt's published per-provider catalogs (dstack's maintained GPU offer collection; no credentials).

The published layout (gpuhunt 0.1.34, ``gpuhunt/_internal/catalog.py``): ``<base>/<provider>/version`` holds
the latest version (``YYYYMMDD-<run>``), ``<base>/<provider>/<version>/catalog.zip`` a zip with
``<provider>.csv`` in gpuhunt's v2 columns. ``<base>`` is ``$GPUHUNT_CATALOG_URL`` or gpuhunt's bucket.

orch downloads the two files itself (httpx, with timeouts) and parses the CSV with gpuhunt's own row reader,
rather than calling ``gpuhunt.Catalog.load()``: that call has no timeout (a stalled download would hang the
daemon's refresh), loads all nine of gpuhunt's providers, only logs a provider's failure, and does not give
the archive's publication time, which orch records as each row's capture time (``Last-Modified``).
"""

from __future__ import annotations

import csv
import io
import logging
import re
import zipfile
from dataclasses import dataclass
from datetime import UTC, date, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from providers.base import Market, Offer
from providers.catalog.interconnect import interconnect_for
from providers.catalog.refresh.model import RefreshContext, SourceError, StepResult
from providers.gpus import UnknownGpuError, resolve_gpu

if TYPE_CHECKING:
    import httpx

#: orch's provider name -> gpuhunt's.
GPUHUNT_NAMES = {"aws": "aws", "azure": "azure", "gcp": "gcp", "lambda": "lambdalabs", "runpod": "runpod"}
#: gpuhunt flags orch accepts; a row with any other flag is one dstack hides too (DWS calendar mode, RunPod
#: clusters and CPU pods, preview machines).
ACCEPTED_FLAGS = frozenset({"gcp-a4", "gcp-g4", "lambda-arm"})
_VERSION = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MAX_ARCHIVE_BYTES = 256 * 1024 * 1024


def base_url(ctx: RefreshContext) -> str:
    if ctx.settings.gpuhunt_url:
        return ctx.settings.gpuhunt_url.rstrip("/")
    try:
        from gpuhunt._internal.catalog import _get_base_url
    except ImportError as exc:
        raise SourceError("gpuhunt is not installed: pip install 'orch[catalog]'") from exc
    return str(_get_base_url())


def _get(client: httpx.Client, url: str) -> httpx.Response:
    import httpx

    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        raise SourceError(f"GET {url}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise SourceError(f"GET {url}: HTTP {response.status_code}")
    return response


@dataclass(frozen=True, slots=True)
class Archive:
    """One provider's published catalog: its rows (gpuhunt CatalogItems), version and publication time."""

    items: list[Any]
    version: str
    published: datetime | None
    unreadable_rows: int


def fetch_archive(ctx: RefreshContext, gpuhunt_name: str) -> Archive:
    try:
        from gpuhunt._internal.storage import load as load_rows
    except ImportError as exc:
        raise SourceError("gpuhunt is not installed: pip install 'orch[catalog]'") from exc
    # gpuhunt logs each row it skips; orch counts them and says so once, in the refresh's note.
    logging.getLogger("gpuhunt").setLevel(logging.ERROR)
    base = base_url(ctx)
    version = _get(ctx.client, f"{base}/{gpuhunt_name}/version").text.strip()
    if not _VERSION.match(version):
        raise SourceError(f"gpuhunt {gpuhunt_name}: unexpected version {version[:40]!r}")
    response = _get(ctx.client, f"{base}/{gpuhunt_name}/{version}/catalog.zip")
    if len(response.content) > MAX_ARCHIVE_BYTES:
        raise SourceError(f"gpuhunt {gpuhunt_name} {version}: archive over {MAX_ARCHIVE_BYTES} bytes")
    try:
        with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
            text = archive.read(f"{gpuhunt_name}.csv").decode("utf-8")
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError) as exc:
        raise SourceError(f"gpuhunt {gpuhunt_name} {version}: not a catalog archive: {exc}") from None
    lines = sum(1 for _ in csv.reader(io.StringIO(text))) - 1
    items = list(load_rows(io.StringIO(text), provider=gpuhunt_name))   # gpuhunt skips (and logs) bad rows
    if lines <= 0 or len(items) < lines / 2:
        raise SourceError(f"gpuhunt {gpuhunt_name} {version}: {lines - len(items)} of {lines} rows unreadable")
    published = None
    if "last-modified" in response.headers:
        try:
            published = parsedate_to_datetime(response.headers["last-modified"]).astimezone(UTC)
        except (TypeError, ValueError):
            published = None
    return Archive(items, version, published, lines - len(items))


def _version_day(version: str) -> date | None:
    try:
        return datetime.strptime(version[:8], "%Y%m%d").date()
    except ValueError:
        return None


def _place(provider: str, location: str) -> tuple[str, str | None]:
    """(region, zone) of a gpuhunt location: GCP locations are zones; RunPod secure-cloud ones are data
    centres (``US-CA-1``), kept as both, so a launch pins the data centre."""
    if provider == "gcp" and location.count("-") >= 2:
        return location.rsplit("-", 1)[0], location
    if provider == "runpod" and "-" in location:
        return location, location
    return location, None


def _instance_type(provider: str, item: Any) -> str:
    if provider == "gcp" and item.instance_name.startswith("n1-") and item.gpu_count:
        return f"{item.instance_name}+{item.gpu_count}x{item.gpu_name}"      # providers.gcp.machines.machine_shape
    if provider == "runpod":
        cloud = "SECURE" if "-" in item.location else "COMMUNITY"
        return f"{item.gpu_count}x_{item.instance_name}_{cloud}"             # as the RunPod adapter names them
    return str(item.instance_name)


def to_offer(provider: str, item: Any, as_of: date, captured_at: datetime | None, source: str) -> Offer | None:
    """An orch offer for a gpuhunt row, or None for a row orch does not sell (no NVIDIA GPU orch knows, a
    flag dstack hides)."""
    if not item.gpu_count or not item.gpu_name or (item.gpu_vendor and item.gpu_vendor.value != "nvidia"):
        return None
    if set(item.flags) - ACCEPTED_FLAGS:
        return None
    try:
        model = resolve_gpu(item.gpu_name, vram_gb=item.gpu_memory)
    except UnknownGpuError:
        return None
    region, zone = _place(provider, item.location)
    itype = _instance_type(provider, item)
    return Offer(
        provider=provider, instance_type=itype, region=region, zone=zone, gpu=model.name,
        gpu_count=int(item.gpu_count), vram_gb=float(item.gpu_memory or model.vram_gb), vcpus=float(item.cpu),
        memory_gb=float(item.memory), interconnect=interconnect_for(provider, itype, int(item.gpu_count)),
        market=Market.SPOT if item.spot else Market.ON_DEMAND, price_hr=float(item.price), price_as_of=as_of,
        price_as_of_approximate=captured_at is None, captured_at=captured_at, price_source=source,
    )


@dataclass(frozen=True, slots=True)
class GpuhuntArchive:
    """The first step of a provider's refresh: all its rows from gpuhunt's published archive."""

    provider: str
    name: str = "gpuhunt"

    def run(self, rows: list[Offer], ctx: RefreshContext) -> StepResult:
        gh = GPUHUNT_NAMES[self.provider]
        archive = fetch_archive(ctx, gh)
        day = archive.published.date() if archive.published else _version_day(archive.version) or ctx.now.date()
        source = f"gpuhunt {gh} {archive.version}"
        offers = [o for o in (to_offer(self.provider, i, day, archive.published, source) for i in archive.items)
                  if o is not None]
        if not offers:
            raise SourceError(f"gpuhunt {gh} {archive.version}: no GPU offer orch knows in {len(archive.items)} rows")
        when = (f"published {archive.published:%Y-%m-%d %H:%M} UTC" if archive.published
                else f"dated {day} (no publication time: approximate)")
        skipped = f", {archive.unreadable_rows} unreadable rows skipped" if archive.unreadable_rows else ""
        return StepResult(offers, f"{source} ({when}): {len(offers)} GPU rows of {len(archive.items)}{skipped}")
