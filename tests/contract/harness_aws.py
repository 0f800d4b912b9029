"""Contract harness for AWS: the real boto3 adapter against moto in server mode (tests/fakes/aws.py)."""

from __future__ import annotations

from providers.base import LaunchSpec, Market, Offer, Provider
from tests.contract.harness import Fault, ProviderHarness
from tests.contract.harness import catalog_offer as shared_catalog_offer

REGION = "us-east-1"
INSTANCE_TYPE = "g5.48xlarge"  # a real catalog offer in us-east-1 (A10G x8); moto knows its GpuInfo
_FAULTS = {
    Fault.CAPACITY: "capacity",
    Fault.QUOTA: "quota",
    Fault.THROTTLE: "throttle",
    Fault.AUTH: "auth",
    Fault.SERVER_ERROR: "server-error",
}


def catalog_offer(market: Market, instance_type: str = INSTANCE_TYPE, region: str = REGION) -> Offer:
    return shared_catalog_offer("aws", instance_type, region, market)


class AwsHarness(ProviderHarness):
    name = "aws"
    supports_spot = True
    supported_faults = frozenset(Fault)
    preempted_reason = "Server.SpotInstanceTermination"
    missing_instance_id = f"{REGION}/i-0123456789abcdef0"

    def __init__(self) -> None:
        import boto3

        from providers.aws.adapter import AwsProvider
        from providers.aws.settings import Settings
        from tests.fakes.aws import FAKE_ENV, FakeAws

        self.fake = FakeAws()
        # Fake keys live in this session only: nothing is written to os.environ or settings.
        session = boto3.Session(aws_access_key_id=FAKE_ENV["AWS_ACCESS_KEY_ID"],
                                aws_secret_access_key=FAKE_ENV["AWS_SECRET_ACCESS_KEY"], region_name=REGION)
        settings = Settings(
            regions=[REGION], endpoint_url=self.fake.endpoint_url,
            # moto's image list has Canonical's Ubuntu images; this exercises the newest-match AMI lookup.
            ami_owners=["099720109477"], ami_name_pattern="ubuntu/images/hvm-ssd/ubuntu-*-amd64-server-*",
            retry_attempts=4, retry_initial_wait_s=0.001, retry_max_wait_s=0.01, retry_deadline_s=600.0,
        )
        self._provider = AwsProvider(settings, session=session)

    def provider(self) -> Provider:
        return self._provider

    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        return LaunchSpec(launch_id=launch_id, owner=owner, job="contract-job", offer=catalog_offer(market),
                          startup_script="#!/bin/sh\necho orch\n")

    def inject(self, fault: Fault, times: int = 1) -> None:
        self.fake.fail("RunInstances", _FAULTS[fault], times)

    def preempt(self, instance_id: str) -> None:
        region, _, ec2_id = instance_id.partition("/")
        self.fake.interrupt(ec2_id, region)

    def reset(self) -> None:
        self.fake.reset()

    def close(self) -> None:
        self._provider.close()
        self.fake.close()


def make_harness() -> ProviderHarness:
    return AwsHarness()
