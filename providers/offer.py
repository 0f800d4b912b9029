"""The values ``orch quote`` reads: an offer, a request for GPUs, and the words they use.

Defined apart from ``providers.base`` (which re-exports every name here, the one place the rest of orch imports
them from) because a quote needs only these: the provider protocol, instances, launch specs and cloud resources
there cost ``orch quote`` milliseconds of class creation it never uses (tests/bench/bench_quote.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum

from providers.gpus import Interconnect

__all__ = ["Availability", "GpuRequest", "Market", "Offer", "OfferOrigin"]


class Market(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"


class Availability(StrEnum):
    """What an offer's source says about capacity now. The catalog knows nothing: UNKNOWN."""

    UNKNOWN = "unknown"
    AVAILABLE = "available"
    NOT_AVAILABLE = "not-available"


class OfferOrigin(StrEnum):
    """Where an offer's price comes from (``Offer.source``)."""

    CATALOG = "catalog"  # the shipped or refreshed catalog
    LIVE = "live"  # a provider's pricing API, just now
    OWN = "own"  # a machine you own, from orch's config, at the price you set there
    STORE = "store"  # rebuilt from orch's store (an attempt whose offer left the catalog)


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a caller wants: ``count`` GPUs in ONE machine, ``nodes`` such machines.

    Empty tuples mean "any". ``max_price_hr`` is for the whole request (all nodes). ``disk_gb`` is the disk each
    machine will carry, for a provider whose hourly price depends on it (Vast.ai bills disk by the hour): its
    offers are priced with that disk; None: the provider's configured default.
    """

    gpus: tuple[str, ...] = ()  # canonical GPU names (providers.gpus)
    count: int = 1
    nodes: int = 1
    markets: frozenset[Market] = frozenset({Market.ON_DEMAND, Market.SPOT})
    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()  # fnmatch globs, matched against region and zone
    max_price_hr: float | None = None
    min_vram_gb: float | None = None
    interconnect: Interconnect | None = None
    exclude_zones: frozenset[str] = frozenset()
    disk_gb: float | None = None


@dataclass(frozen=True, slots=True)
class Offer:
    """One machine type at one place and market, with its price per instance-hour.

    ``price_as_of`` is the date the price was captured; ``price_as_of_approximate`` is True when that
    date is an estimate (the shipped catalog's source has no capture dates). ``captured_at`` is the exact
    capture time (UTC) where it is known (a refreshed catalog row, a live price), else None.
    ``vcpus`` / ``memory_gb`` are None where the source does not say (the shipped Vast.ai rows).
    ``price_source`` names where a catalog row's price came from (``gpuhunt aws 20261202-88``).
    """

    provider: str
    instance_type: str
    region: str
    zone: str | None
    gpu: str
    gpu_count: int
    vram_gb: float
    vcpus: float | None
    memory_gb: float | None
    interconnect: Interconnect
    market: Market
    price_hr: float
    price_as_of: date
    price_as_of_approximate: bool = False
    source: OfferOrigin = OfferOrigin.CATALOG
    availability: Availability = Availability.UNKNOWN
    offer_id: str | None = None  # a provider's own handle (a Vast ask id, a RunPod gpu type)
    captured_at: datetime | None = None
    price_source: str = ""
    #: The most local disk a launch on this offer can have, where the machine's disk is fixed (a Vast ask's
    #: disk_space, a Lambda type's local storage, your own machine's); None: no known limit (the clouds that
    #: create the boot disk at LaunchSpec.disk_gb, or a limit nobody told orch).
    max_disk_gb: float | None = None

    @property
    def price_per_gpu_hr(self) -> float:
        return self.price_hr / self.gpu_count

    @property
    def vcpus_per_gpu(self) -> float | None:
        return None if self.vcpus is None else self.vcpus / self.gpu_count

    @property
    def memory_gb_per_gpu(self) -> float | None:
        return None if self.memory_gb is None else self.memory_gb / self.gpu_count

    @property
    def key(self) -> tuple[str, str, str, str | None, Market]:
        """Identity of an offer regardless of its price: used to merge live prices onto the catalog."""
        return (self.provider, self.instance_type, self.region, self.zone, self.market)
