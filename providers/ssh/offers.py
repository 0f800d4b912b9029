"""Your machines as offers, from the settings alone: no SSH connection, no SDK, no cloud call.

``orch quote`` and ``orch plan`` list them through the registry's ``config_offers`` hook (pydantic and the
standard library only); the adapter's ``offers`` returns the same values. A host reserved by a launch (a
record in the shared state dir) is offered as NOT_AVAILABLE, so the planner passes it over.
"""

from __future__ import annotations

from datetime import date

from providers.base import Availability, Market, Offer, OfferOrigin
from providers.ssh.reservations import ReservationBook
from providers.ssh.settings import HostSettings, Settings

__all__ = ["host_offer", "host_offers"]

NAME = "ssh"


def host_offer(settings: Settings, host: HostSettings, today: date, reserved: bool) -> Offer:
    """One configured host as an on-demand offer at its configured price (``instance_type`` = host name)."""
    return Offer(
        provider=NAME, instance_type=host.name, region=host.region, zone=None, gpu=host.gpu,
        gpu_count=host.gpu_count, vram_gb=host.vram_gb,
        vcpus=host.vcpus or None, memory_gb=host.memory_gb or None,   # 0 in the config: unknown
        interconnect=host.resolved_interconnect, market=Market.ON_DEMAND, price_hr=settings.host_price(host),
        price_as_of=today, source=OfferOrigin.OWN,
        availability=Availability.NOT_AVAILABLE if reserved else Availability.AVAILABLE,
        offer_id=host.name, max_disk_gb=host.disk_gb,
    )


def host_offers(settings: Settings, today: date | None = None) -> list[Offer]:
    """Every configured host, in config order; reserved ones NOT_AVAILABLE."""
    book = ReservationBook(settings.state_path)
    day = today or date.today()
    return [host_offer(settings, h, day, book.get(h.name) is not None) for h in settings.hosts]
