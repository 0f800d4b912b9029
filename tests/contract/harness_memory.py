"""Contract harness for tests/fakes/memory_provider.py: the in-memory fake the engine tests drive.

The engine's own tests trust this fake to behave as an adapter does; running it through the same suite
as the real adapters keeps that trust earned (it first did not retry a transient error in place, as the
Provider contract asks: it raised the first 5xx). Faults are queued on the shared MemoryCloud, as the
engine tests queue them.
"""

from __future__ import annotations

from dataclasses import replace

from providers.base import LaunchSpec, Market, Offer
from providers.errors import (
    AuthError,
    InsufficientCapacityError,
    ProviderError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)
from tests.contract.harness import Fault, ProviderHarness, catalog_offer
from tests.fakes.memory_provider import MemoryCloud, MemoryProvider

NAME = "memory"


def _offer(market: Market) -> Offer:
    return replace(catalog_offer("aws", "p4d.24xlarge", "us-east-1", market), provider=NAME)


class MemoryHarness(ProviderHarness):
    name = NAME
    supported_faults = frozenset(Fault)
    preempted_reason = "spot-reclaimed"
    missing_instance_id = "memory-999999"

    def __init__(self) -> None:
        self.cloud = MemoryCloud()
        self.offers = [_offer(Market.ON_DEMAND), _offer(Market.SPOT)]

    def provider(self) -> MemoryProvider:
        return MemoryProvider(NAME, self.offers, self.cloud)

    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        return LaunchSpec(launch_id=launch_id, owner=owner, job="contract-job", offer=_offer(market))

    def inject(self, fault: Fault, times: int = 1) -> None:
        error: ProviderError = {
            Fault.CAPACITY: InsufficientCapacityError("no capacity", provider=NAME),
            Fault.QUOTA: QuotaExceededError("quota exceeded", provider=NAME),
            Fault.THROTTLE: RateLimitedError("throttled", provider=NAME),
            Fault.AUTH: AuthError("bad credentials", provider=NAME),
            Fault.SERVER_ERROR: ProviderUnavailableError("HTTP 503", provider=NAME),
        }[fault]
        self.provider().fail("launch", *([error] * times))

    def preempt(self, instance_id: str) -> None:
        self.provider().preempt(instance_id)

    def reset(self) -> None:
        with self.cloud.lock:
            self.cloud.instances.clear()
            self.cloud.fail_next.clear()

    def close(self) -> None:
        self.reset()


def make_harness() -> ProviderHarness:
    return MemoryHarness()
