"""Contract harness for GCP: the real GcpProvider (google-cloud-compute, REST) against tests/fakes/gce.py."""

from __future__ import annotations

from providers.base import LaunchSpec, Market, Offer
from providers.catalog import load_catalog
from providers.gcp.adapter import GcpProvider
from providers.gcp.settings import Settings
from tests.contract.harness import Fault, ProviderHarness
from tests.fakes.gce import GceFake


def fast_settings(url: str, project: str, **overrides: object) -> Settings:
    values: dict[str, object] = dict(project=project, zones=["us-east5-a", "us-central1-a"], api_endpoint=url,
                                     anonymous_credentials=True, timeout_s=5.0, operation_timeout_s=10.0,
                                     retry_attempts=4, retry_initial_wait_s=0.001, retry_max_wait_s=0.01,
                                     retry_deadline_s=5.0)
    values.update(overrides)
    return Settings.model_validate(values)


def catalog_offer(instance_type: str, region: str, market: Market) -> Offer:
    return next(o for o in load_catalog().offers if o.provider == "gcp" and o.instance_type == instance_type
                and o.region == region and o.market is market)


class GcpHarness(ProviderHarness):
    name = "gcp"
    supports_spot = True
    supported_faults = frozenset(Fault)
    preempted_reason = "compute.instances.preempted"
    missing_instance_id = "us-east5-a/orch-nobody-l000000000000"

    def __init__(self) -> None:
        self.fake = GceFake()
        self.url = self.fake.start()
        self._providers: list[GcpProvider] = []

    def provider(self) -> GcpProvider:
        p = GcpProvider(fast_settings(self.url, self.fake.project))
        self._providers.append(p)
        return p

    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        return LaunchSpec(launch_id=launch_id, owner=owner, job="contract",
                          offer=catalog_offer("a2-ultragpu-4g", "us-east5", market),
                          startup_script="#!/bin/bash\necho hello\n")

    def inject(self, fault: Fault, times: int = 1) -> None:
        self.fake.inject(fault.value, -1 if fault is Fault.THROTTLE else times)

    def preempt(self, instance_id: str) -> None:
        zone, name = instance_id.split("/", 1)
        self.fake.preempt(zone, name)

    def reset(self) -> None:
        self.fake.reset()

    def close(self) -> None:
        for p in self._providers:
            p.close()
        self.fake.stop()


def make_harness() -> GcpHarness:
    return GcpHarness()
