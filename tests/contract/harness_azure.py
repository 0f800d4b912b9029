"""Contract harness for Azure: the real adapter (azure-mgmt-*) against tests/fakes/azure_arm.py."""

from __future__ import annotations

from providers.base import LaunchSpec, Market, Offer, Provider
from providers.retry import RetryPolicy
from tests.contract.harness import Fault, ProviderHarness
from tests.contract.harness import catalog_offer as shared_catalog_offer
from tests.fakes.azure_arm import FakeArm

SUB = "00000000-0000-0000-0000-000000000000"
RG = "orch-test"
SUBNET = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks/vnet/subnets/default"
INSTANCE_TYPE = "Standard_NC24ads_A100_v4"
REGION = "eastus"

_FAULTS = {
    Fault.CAPACITY: "capacity",
    Fault.QUOTA: "quota",
    Fault.THROTTLE: "throttle",
    Fault.AUTH: "auth",
    Fault.SERVER_ERROR: "server-error",
}


def catalog_offer(market: Market) -> Offer:
    return shared_catalog_offer("azure", INSTANCE_TYPE, REGION, market)


def make_settings(url: str, **overrides: object) -> object:
    from providers.azure.settings import Settings

    return Settings(subscription_id=SUB, resource_group=RG, subnet_id=SUBNET, base_url=url, static_token="fake-token",
                    polling_interval_s=0, **overrides)


class AzureHarness(ProviderHarness):
    name = "azure"
    supports_spot = True
    supported_faults = frozenset(Fault)
    preempted_reason = "Azure eviction"

    def __init__(self) -> None:
        import providers.azure.adapter  # noqa: F401 - raise ImportError here when the SDK extra is missing

        self.fake = FakeArm()
        self.url = self.fake.serve()
        self._providers: list[Provider] = []

    def provider(self) -> Provider:
        from providers.azure.adapter import AzureProvider

        p = AzureProvider(make_settings(self.url), retry=RetryPolicy.fast())  # type: ignore[arg-type]
        self._providers.append(p)
        return p

    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        return LaunchSpec(launch_id=launch_id, owner=owner, job="contract-job", offer=catalog_offer(market),
                          ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests test",
                          startup_script="#!/bin/sh\necho hello\n")

    def inject(self, fault: Fault, times: int = 1) -> None:
        self.fake.inject(_FAULTS[fault], times)

    def preempt(self, instance_id: str) -> None:
        self.fake.evict(instance_id, RG)

    def reset(self) -> None:
        self.fake.reset()

    def close(self) -> None:
        for p in self._providers:
            p.close()
        self.fake.close()


def make_harness() -> ProviderHarness:
    return AzureHarness()
