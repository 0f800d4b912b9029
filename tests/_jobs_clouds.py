"""Local fake clouds for the job-command tests, and an orch config file pointing at them.

Vast.ai, Lambda, RunPod, GCE and Azure ARM fakes run in this process (threads on 127.0.0.1), so an
``orch`` subprocess reaches them too. Their inventories are widened so that every example manifest has somewhere to go:
Vast gets an L4 (spot, for examples/command.yaml) and Lambda gets 8x A100 80GB capacity in us-east-1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from providers.base import Instance, Provider
from providers.registry import create_provider, load_settings
from tests.fakes.azure_arm import FakeArm
from tests.fakes.gce import GceServer
from tests.fakes.lambda_cloud import DEFAULT_CAPACITY, LambdaFake, start_lambda_fake
from tests.fakes.lr_base import FakeServer
from tests.fakes.runpod import RunPodFake, start_runpod_fake
from tests.fakes.vast import DEFAULT_API_KEY, VastFake, _offer

OWNER = "tester"
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJobsCliTestKeyForTheFakeClouds orch-test"
L4_ASK = 7004001
ARM_SUB = "00000000-0000-0000-0000-000000000000"
ARM_SUBNET = (f"/subscriptions/{ARM_SUB}/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/v"
              "/subnets/default")
_FAST = {"retry_attempts": 2, "retry_initial_wait_s": 0.001, "retry_max_wait_s": 0.01, "retry_deadline_s": 600.0,
         "timeout_s": 5.0}


@dataclass
class FakeClouds:
    vast: VastFake
    vast_url: str
    lambda_fake: LambdaFake
    lambda_server: FakeServer
    runpod: RunPodFake
    runpod_server: FakeServer
    gce: GceServer
    arm: FakeArm

    def sections(self) -> dict[str, dict[str, Any]]:
        return {
            "vastai": {"base_url": self.vast_url, "min_interval_s": 0.0, **_FAST},
            "lambda": {"base_url": f"{self.lambda_server.url}/api/v1", "min_interval_s": 0.0,
                       "launch_interval_s": 0.0, **_FAST},
            "runpod": {"graphql_url": f"{self.runpod_server.url}/graphql", "min_interval_s": 0.0, **_FAST},
            "gcp": {"project": "orch-test", "zones": ["us-east5-a", "us-central1-a"], "api_endpoint": self.gce.endpoint,
                    "anonymous_credentials": True, "operation_timeout_s": 10.0, **_FAST},
            "azure": {"subscription_id": ARM_SUB, "resource_group": "orch-test", "subnet_id": ARM_SUBNET,
                      "base_url": self.arm.url, "static_token": "test-token", "polling_interval_s": 0.0,
                      **{k: v for k, v in _FAST.items() if k != "timeout_s"}},
        }

    def env(self) -> dict[str, str]:
        """Credentials the way users give them: environment variables (never in the config file)."""
        return {"VAST_API_KEY": DEFAULT_API_KEY, "LAMBDA_API_KEY": self.lambda_fake.api_key,
                "RUNPOD_API_KEY": self.runpod.api_key, "ORCH_SSH_PUBLIC_KEY": PUBLIC_KEY}

    def write_config(self, path: Path, only: tuple[str, ...] | None = None) -> Path:
        sections = {k: v for k, v in self.sections().items() if only is None or k in only}
        path.write_text(yaml.safe_dump({"owner": OWNER, "providers": sections}))
        return path

    def reset(self) -> None:
        self.vast.reset()
        with self.vast.lock:
            self.vast.state.offers[L4_ASK] = _offer(L4_ASK, 71, "L4", 1, 23034, dph_base=0.30, min_bid=0.12,
                                                    geolocation="Oregon, US", cpu_cores=8, cpu_ram=32150)
        self.lambda_fake.reset()
        self.lambda_fake.capacity = dict(DEFAULT_CAPACITY) | {"gpu_8x_a100_80gb_sxm4": ("us-east-1",)}
        self.runpod.reset()
        self.gce.fake.reset()
        self.arm.reset()

    def providers(self) -> dict[str, Provider]:
        """The real adapters against the fakes (with credentials from env())."""
        out: dict[str, Provider] = {}
        for name, section in self.sections().items():
            key = {"vastai": DEFAULT_API_KEY, "lambda": self.lambda_fake.api_key, "runpod": self.runpod.api_key}
            extra = {"api_key": key[name]} if name in key else {}
            out[name] = create_provider(name, load_settings(name, {**section, **extra}))
        return out

    def live_instances(self) -> dict[str, list[Instance]]:
        """What each cloud still runs for OWNER (as its adapter lists it), gone ones left out."""
        out: dict[str, list[Instance]] = {}
        for name, provider in self.providers().items():
            try:
                out[name] = [i for i in provider.list_instances(OWNER) if not i.state.is_gone]
            finally:
                provider.close()  # type: ignore[attr-defined]
        return out

    def raw_counts(self) -> dict[str, int]:
        """Instances the fakes themselves still hold as not terminated (independent of the adapters)."""
        with self.vast.lock:
            vast = len(self.vast.state.instances)          # destroy removes the row
        lam = sum(1 for i in self.lambda_fake.instances.values() if i.status not in ("terminated", "terminating"))
        rp = sum(1 for p in self.runpod.pods.values() if p.desired != "TERMINATED")
        gcp = sum(1 for i in self.gce.fake._state.instances.values() if i.get("status") != "TERMINATED")
        with self.arm.lock:
            azure = len(self.arm.state.vms)                # delete removes the VM
        return {"vastai": vast, "lambda": lam, "runpod": rp, "gcp": gcp, "azure": azure}

    def close(self) -> None:
        self.vast.stop()
        self.lambda_server.stop()
        self.runpod_server.stop()
        self.gce.stop()
        self.arm.close()


def start_clouds() -> FakeClouds:
    vast = VastFake()
    url = vast.start()
    lam, lam_server = start_lambda_fake()
    rp, rp_server = start_runpod_fake()
    gce, arm = GceServer().start(), FakeArm()
    arm.serve()
    clouds = FakeClouds(vast, url, lam, lam_server, rp, rp_server, gce, arm)
    clouds.reset()
    return clouds
