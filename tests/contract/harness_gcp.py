"""GCP harness: the real GcpProvider (google-cloud-compute, REST) against tests/fakes/gce.py on 127.0.0.1."""

from __future__ import annotations

from providers.base import LaunchSpec, Market, Offer, Provider
from tests.contract.harness import Fault, ProviderHarness
from tests.contract.harness import catalog_offer as shared_catalog_offer
from tests.fakes.gce import GceServer

PROJECT = "orch-test"
ZONE = "us-central1-a"
#: A real catalog offer: 2x L4 in us-central1.
INSTANCE_TYPE = "g2-standard-24"
REGION = "us-central1"


def catalog_offer(market: Market, instance_type: str = INSTANCE_TYPE, region: str = REGION) -> Offer:
    return shared_catalog_offer("gcp", instance_type, region, market)


class GcpHarness(ProviderHarness):
    name = "gcp"
    supports_spot = True
    supported_faults = frozenset(Fault)
    preempted_reason = "compute.instances.preempted"
    missing_instance_id = f"{ZONE}/orch-contract-l000000000000"

    def __init__(self) -> None:
        # Imported here so a missing SDK skips the suite (ImportError) instead of breaking collection.
        from providers.gcp.adapter import GcpProvider
        from providers.gcp.settings import Settings

        self.server = GceServer().start()
        self.fake = self.server.fake
        self.settings = Settings(project=PROJECT, zones=[ZONE], api_endpoint=self.server.endpoint,
                                 anonymous_credentials=True, retry_attempts=4, retry_initial_wait_s=0.001,
                                 retry_max_wait_s=0.01, retry_deadline_s=600.0, operation_timeout_s=10.0)
        self._provider = GcpProvider(self.settings)

    def provider(self) -> Provider:
        return self._provider

    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        return LaunchSpec(launch_id=launch_id, owner=owner, job="contract-job", offer=catalog_offer(market),
                          ssh_public_key="ssh-ed25519 AAAATEST orch", startup_script="#!/bin/sh\necho hi\n")

    def inject(self, fault: Fault, times: int = 1) -> None:
        self.fake.inject(fault.value, times)

    def preempt(self, instance_id: str) -> None:
        zone, _, name = instance_id.partition("/")
        self.fake.preempt(zone, name)

    def reset(self) -> None:
        self.fake.reset()

    def close(self) -> None:
        self._provider.close()
        self.server.stop()


def make_harness() -> ProviderHarness:
    return GcpHarness()
