"""Contract harness for Lambda Cloud: the real LambdaProvider against tests/fakes/lambda_cloud.py."""

from __future__ import annotations

from datetime import date

from pydantic import SecretStr

from providers.base import Availability, Interconnect, LaunchSpec, Market, Offer, OfferOrigin
from providers.lambdalabs.adapter import LambdaProvider
from providers.lambdalabs.settings import Settings
from providers.retry import RetryPolicy
from tests.contract.harness import Fault, ProviderHarness
from tests.fakes.lambda_cloud import LambdaFake, start_lambda_fake

PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIContractHarnessKeyForTheLambdaFake orch-test"

_FAULTS = {Fault.CAPACITY: "capacity", Fault.QUOTA: "quota", Fault.THROTTLE: "throttle", Fault.AUTH: "auth",
           Fault.SERVER_ERROR: "server_error"}


def fast_settings(base_url: str, api_key: str = "test-key") -> Settings:
    """Settings for tests: tiny limiter intervals and RetryPolicy.fast()'s waits."""
    fast = RetryPolicy.fast()
    return Settings(api_key=SecretStr(api_key), base_url=base_url, min_interval_s=0.0, launch_interval_s=0.0,
                    retry_attempts=fast.attempts, retry_initial_wait_s=fast.initial_wait_s,
                    retry_max_wait_s=fast.max_wait_s, retry_deadline_s=fast.deadline_s, timeout_s=5.0)


def h100_offer(region: str = "us-east-1") -> Offer:
    return Offer(provider="lambda", instance_type="gpu_8x_h100_sxm5", region=region, zone=None, gpu="H100-80G",
                 gpu_count=8, vram_gb=80, vcpus=208, memory_gb=1800, interconnect=Interconnect.NVLINK,
                 market=Market.ON_DEMAND, price_hr=23.92, price_as_of=date(2026, 12, 1), source=OfferOrigin.LIVE,
                 availability=Availability.AVAILABLE)


class LambdaHarness(ProviderHarness):
    name = "lambda"
    supports_spot = False
    missing_instance_id = "0920582c7ff041399e34823a0be62549"

    def __init__(self) -> None:
        self.fake: LambdaFake
        self.fake, self.server = start_lambda_fake()
        self._provider = LambdaProvider(fast_settings(f"{self.server.url}/api/v1"), catalog=())

    def provider(self) -> LambdaProvider:
        return self._provider

    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        return LaunchSpec(launch_id=launch_id, owner=owner, job="contract-job", offer=h100_offer(),
                          ssh_public_key=PUBLIC_KEY, startup_script="#!/bin/sh\necho hello\n")

    def inject(self, fault: Fault, times: int = 1) -> None:
        self.fake.faults.arm(_FAULTS[fault], -1 if fault is Fault.THROTTLE else times)

    def reset(self) -> None:
        self.fake.reset()

    def close(self) -> None:
        self._provider.close()
        self.server.stop()


def make_harness() -> LambdaHarness:
    return LambdaHarness()
