"""Contract harness for RunPod: the real RunPodProvider against tests/fakes/runpod.py (GraphQL)."""

from __future__ import annotations

from datetime import date

from pydantic import SecretStr

from providers.base import Availability, Interconnect, LaunchSpec, Market, Offer, OfferOrigin
from providers.retry import RetryPolicy
from providers.runpod.adapter import RunPodProvider
from providers.runpod.settings import Settings
from tests.contract.harness import Fault, ProviderHarness
from tests.fakes.runpod import RunPodFake, start_runpod_fake

PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIContractHarnessKeyForTheRunPodFake orch-test"

_FAULTS = {Fault.CAPACITY: "capacity", Fault.QUOTA: "quota", Fault.THROTTLE: "throttle", Fault.AUTH: "auth",
           Fault.SERVER_ERROR: "server_error"}


def fast_settings(graphql_url: str, api_key: str = "test-key") -> Settings:
    """Settings for tests: no client-side interval and RetryPolicy.fast()'s waits."""
    fast = RetryPolicy.fast()
    return Settings(api_key=SecretStr(api_key), graphql_url=graphql_url, min_interval_s=0.0,
                    retry_attempts=fast.attempts, retry_initial_wait_s=fast.initial_wait_s,
                    retry_max_wait_s=fast.max_wait_s, retry_deadline_s=fast.deadline_s, timeout_s=5.0)


def a100_offer(count: int = 2) -> Offer:
    return Offer(provider="runpod", instance_type=f"{count}x_NVIDIA A100 80GB PCIe_SECURE", region="US", zone=None,
                 gpu="A100-80G", gpu_count=count, vram_gb=80, vcpus=8 * count, memory_gb=117 * count,
                 interconnect=Interconnect.PCIE, market=Market.ON_DEMAND, price_hr=1.64 * count,
                 price_as_of=date(2026, 12, 1), source=OfferOrigin.LIVE, availability=Availability.AVAILABLE,
                 offer_id="NVIDIA A100 80GB PCIe")


class RunPodHarness(ProviderHarness):
    name = "runpod"
    supports_spot = False
    missing_instance_id = "zzzzzzzzzzzzzz"

    def __init__(self) -> None:
        self.fake: RunPodFake
        self.fake, self.server = start_runpod_fake()
        self._provider = RunPodProvider(fast_settings(f"{self.server.url}/graphql"))

    def provider(self) -> RunPodProvider:
        return self._provider

    def launch_spec(self, launch_id: str, owner: str, market: Market = Market.ON_DEMAND) -> LaunchSpec:
        return LaunchSpec(launch_id=launch_id, owner=owner, job="contract-job", offer=a100_offer(),
                          ssh_public_key=PUBLIC_KEY, startup_script="#!/bin/sh\necho hello\n")

    def inject(self, fault: Fault, times: int = 1) -> None:
        self.fake.faults.arm(_FAULTS[fault], -1 if fault is Fault.THROTTLE else times)

    def reset(self) -> None:
        self.fake.reset()

    def close(self) -> None:
        self._provider.close()
        self.server.stop()


def make_harness() -> RunPodHarness:
    return RunPodHarness()
