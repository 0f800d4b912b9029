"""Settings for the Azure adapter (SDK-free). Credentials: DefaultAzureCredential only."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from providers.retry import RetryPolicy


class Settings(BaseModel):
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
    retry_attempts: int = 6
    retry_initial_wait_s: float = 0.5
    retry_max_wait_s: float = 8.0
    retry_deadline_s: float = 60.0

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(attempts=self.retry_attempts, initial_wait_s=self.retry_initial_wait_s,
                           max_wait_s=self.retry_max_wait_s, deadline_s=self.retry_deadline_s)
