"""Contract harness for Azure: the real AzureProvider (azure-mgmt-compute/-network) against the ARM fake."""

from __future__ import annotations

from providers.azure.adapter import EVICTED, AzureProvider
from providers.azure.settings import Settings
from providers.base import LaunchSpec, Market, Offer
from providers.catalog import load_catalog
from tests.contract.harness import Fault, ProviderHarness
from tests.fakes.azure_arm import ArmFake

SUB = "00000000-0000-0000-0000-000000000000"
SUBNET = f"/subscriptions/{SUB}/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/v/subnets/default"


def fast_settings(url: str, **overrides: object) -> Settings:
    values: dict[str, object] = dict(subscription_id=SUB, resource_group="orch-test", subnet_id=SUBNET, base_url=url,
                                     static_token="test-token", polling_interval_s=0.0, timeout_s=5.0,
                                     retry_attempts=4, retry_initial_wait_s=0.001, retry_max_wait_s=0.01,
                                     retry_deadline_s=5.0)
    values.update(overrides)
    return Settings.model_validate(values)


def catalog_offer(instance_type: str, region: str, market: Market) -> Offer:
    return next(o for o in load_catalog().offers if o.provider == "azure" and o.instance_type == instance_type
                and o.region == region and o.market is market)


class AzureHarness(ProviderHarness):
    name = "azure"
    supports_spot = True
    supported_faults = frozenset(Fault)
    preempted_reason = EVICTED
    missing_instance_id = "orch-nobody-l000000000000"

    def __init__(self) -> None:
        self.fake = ArmFake()
        self.url = self.fake.start()
        self._providers: list[AzureProvider] = []

    def provider(self) -> AzureProvider:
        p = AzureProvider(fast_settings(self.url))
        self._providers.append(p)
        return p

    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        return LaunchSpec(launch_id=launch_id, owner=owner, job="contract",
                          offer=catalog_offer("Standard_NC24ads_A100_v4", "eastus", market),
                          ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOrchTestKey orch",
                          startup_script="#!/bin/bash\necho hello\n")

    def inject(self, fault: Fault, times: int = 1) -> None:
        self.fake.inject(fault.value, -1 if fault is Fault.THROTTLE else times)

    def preempt(self, instance_id: str) -> None:
        self.fake.evict(instance_id)

    def reset(self) -> None:
        self.fake.reset()

    def close(self) -> None:
        for p in self._providers:
            p.close()
        self.fake.stop()


def make_harness() -> AzureHarness:
    return AzureHarness()
