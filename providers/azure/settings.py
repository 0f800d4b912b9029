"""Settings for the Azure adapter (SDK-free). Credentials: DefaultAzureCredential only."""

from __future__ import annotations

import os

from pydantic import ConfigDict, Field, SecretStr

from providers.settings_base import RetrySettings


class Settings(RetrySettings):
    model_config = ConfigDict(frozen=True, extra="forbid")

    subscription_id: str | None = Field(default_factory=lambda: os.environ.get("AZURE_SUBSCRIPTION_ID"))
    resource_group: str | None = None
    subnet_id: str | None = None              # an existing subnet's resource id, for the VMs' NICs
    image_publisher: str = "microsoft-dsvm"
    image_offer: str = "ubuntu-hpc"
    image_sku: str = "2204"
    image_version: str = "latest"
    admin_username: str = "orch"
    #: Deallocate keeps an evicted Spot VM visible (so orch sees the eviction), then orch deletes it.
    eviction_policy: str = "Deallocate"
    base_url: str | None = None               # an ARM endpoint override (tests: the fake on 127.0.0.1)
    static_token: SecretStr | None = None     # tests only: a fixed bearer token, which allows http://
    polling_interval_s: float = 5.0
    timeout_s: float = 30.0

