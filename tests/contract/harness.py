"""What a provider's test harness gives the contract suite.

Each provider adds ``tests/contract/harness_<name>.py`` defining ``make_harness() -> ProviderHarness``.
The harness starts that provider's local server (moto, or a fake under tests/fakes/), builds the REAL
adapter pointed at it, and offers switches to inject faults and preemptions. The suite in
test_contract.py is the same for every provider.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import StrEnum

from providers.base import LaunchSpec, Market, Offer, Provider


def catalog_offer(provider: str, instance_type: str, region: str, market: Market) -> Offer:
    """A real offer from the shipped catalog, for a harness to launch (fails loudly if the catalog lost it)."""
    from providers.catalog import load_catalog

    for offer in load_catalog().offers:
        if (offer.provider, offer.instance_type, offer.region, offer.market) == (provider, instance_type, region,
                                                                                 market):
            return offer
    raise LookupError(f"the shipped catalog has no {provider} {instance_type} {region} {market}")


class Fault(StrEnum):
    CAPACITY = "capacity"          # -> InsufficientCapacityError
    QUOTA = "quota"                # -> QuotaExceededError
    THROTTLE = "throttle"          # persistent 429/throttling -> RateLimitedError after retries
    AUTH = "auth"                  # -> AuthError
    SERVER_ERROR = "server-error"  # one transient 5xx: retried inside the adapter, the call succeeds


class ProviderHarness(ABC):
    name: str
    supports_spot: bool = True
    supported_faults: frozenset[Fault] = frozenset(Fault)
    #: a substring of Instance.raw_reason (or raw_state) after ``preempt``
    preempted_reason: str = ""

    @abstractmethod
    def provider(self) -> Provider:
        """The real adapter, configured against the local server, with a fast retry policy."""

    @abstractmethod
    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        """A spec the local server accepts (an offer this provider really has)."""

    @abstractmethod
    def inject(self, fault: Fault, times: int = 1) -> None:
        """Make the next ``times`` launch calls fail with ``fault`` (THROTTLE: every call until reset)."""

    def preempt(self, instance_id: str) -> None:
        """Reclaim a spot instance the way the cloud does."""
        raise NotImplementedError

    @abstractmethod
    def reset(self) -> None:
        """Clear faults and every instance: each test starts from an empty cloud."""

    @abstractmethod
    def close(self) -> None:
        """Stop the server."""
