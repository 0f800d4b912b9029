"""Contract harness for AWS: the real AwsProvider (boto3) against moto behind tests/fakes/aws.py."""

from __future__ import annotations

import os

from providers.aws.adapter import AwsProvider
from providers.aws.settings import Settings
from providers.base import LaunchSpec, Market, Offer
from providers.catalog import load_catalog
from tests.contract.harness import Fault, ProviderHarness
from tests.fakes.aws import AwsFake, fake_credentials_env


def fast_settings(url: str, **overrides: object) -> Settings:
    values: dict[str, object] = dict(regions=["us-east-1"], endpoint_url=url, amis={"us-east-1": "ami-12c6146b"},
                                     timeout_s=5.0, retry_attempts=4, retry_initial_wait_s=0.001,
                                     retry_max_wait_s=0.01, retry_deadline_s=5.0)
    values.update(overrides)
    return Settings.model_validate(values)


def catalog_offer(instance_type: str, region: str, market: Market) -> Offer:
    return next(o for o in load_catalog().offers if o.provider == "aws" and o.instance_type == instance_type
                and o.region == region and o.market is market)


class AwsHarness(ProviderHarness):
    name = "aws"
    supports_spot = True
    supported_faults = frozenset(Fault)
    preempted_reason = "Server.SpotInstanceTermination"
    missing_instance_id = "us-east-1/i-0123456789abcdef0"

    def __init__(self) -> None:
        for key, value in fake_credentials_env().items():
            os.environ.setdefault(key, value)
        self.fake = AwsFake()
        self.url = self.fake.start()
        self._providers: list[AwsProvider] = []

    def provider(self) -> AwsProvider:
        p = AwsProvider(fast_settings(self.url))
        self._providers.append(p)
        return p

    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        return LaunchSpec(launch_id=launch_id, owner=owner, job="contract",
                          offer=catalog_offer("p4d.24xlarge", "us-east-1", market),
                          ssh_public_key="", startup_script="#!/bin/bash\necho hello\n", disk_gb=100)

    def inject(self, fault: Fault, times: int = 1) -> None:
        self.fake.inject(fault.value, -1 if fault is Fault.THROTTLE else times)

    def preempt(self, instance_id: str) -> None:
        region, iid = instance_id.split("/", 1)
        self.fake.interrupt(region, iid)

    def reset(self) -> None:
        self.fake.reset()

    def close(self) -> None:
        for p in self._providers:
            p.close()
        self.fake.stop()


def make_harness() -> AwsHarness:
    return AwsHarness()
