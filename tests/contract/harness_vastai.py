"""Contract harness for Vast.ai: the real VastProvider against tests/fakes/vast.py on 127.0.0.1."""

from __future__ import annotations

from datetime import date

from providers.base import Availability, Interconnect, LaunchSpec, Market, Offer, OfferOrigin
from providers.vastai.adapter import VastProvider
from providers.vastai.settings import Settings
from tests.contract.harness import Fault, ProviderHarness
from tests.fakes.vast import DEFAULT_API_KEY, VastFake

#: An ask the seeded inventory has and the default filters keep (1x RTX 4090, Texas).
ASK_ID = 7001001


def fast_settings(base_url: str, **overrides: object) -> Settings:
    values: dict[str, object] = dict(api_key=DEFAULT_API_KEY, base_url=base_url, timeout_s=5.0, min_interval_s=0.0,
                                     retry_attempts=4, retry_initial_wait_s=0.001, retry_max_wait_s=0.01,
                                     retry_deadline_s=600.0)
    values.update(overrides)
    return Settings.model_validate(values)


class VastHarness(ProviderHarness):
    name = "vastai"
    supports_spot = True
    supported_faults = frozenset(Fault)
    preempted_reason = "outbid"
    missing_instance_id = "999999999"

    def __init__(self) -> None:
        self.fake = VastFake()
        self.base_url = self.fake.start()
        self._providers: list[VastProvider] = []

    def provider(self) -> VastProvider:
        p = VastProvider(fast_settings(self.base_url))
        self._providers.append(p)
        return p

    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        offer = Offer(provider="vastai", instance_type="1x-RTX_4090-16-64300", region="Texas, US", zone=None,
                      gpu="RTX4090-24G", gpu_count=1, vram_gb=24.0, vcpus=16.0, memory_gb=62.8,
                      interconnect=Interconnect.PCIE, market=market, price_hr=0.36, price_as_of=date.today(),
                      source=OfferOrigin.LIVE, availability=Availability.AVAILABLE, offer_id=str(ASK_ID))
        return LaunchSpec(launch_id=launch_id, owner=owner, job="contract", offer=offer,
                          startup_script="echo hello", disk_gb=50)

    def inject(self, fault: Fault, times: int = 1) -> None:
        self.fake.inject(fault.value, times)

    def preempt(self, instance_id: str) -> None:
        self.fake.outbid(instance_id)

    def reset(self) -> None:
        self.fake.reset()

    def close(self) -> None:
        for p in self._providers:
            p.close()
        self.fake.stop()


def make_harness() -> VastHarness:
    return VastHarness()
