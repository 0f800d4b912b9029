"""Settings for the GCP adapter (SDK-free). Credentials: Application Default Credentials only."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from providers.retry import RetryPolicy


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    project: str | None = Field(default_factory=lambda: os.environ.get("GOOGLE_CLOUD_PROJECT")
                                or os.environ.get("CLOUDSDK_CORE_PROJECT"))
    zones: list[str] = Field(default_factory=list)   # preferred zones; a region's first zone otherwise
    api_endpoint: str | None = None                  # tests: the fake on http://127.0.0.1:PORT
    anonymous_credentials: bool = False              # tests only
    image: str = "projects/deeplearning-platform-release/global/images/family/common-cu124-ubuntu-2204"
    network: str = "global/networks/default"
    #: A spot VM that is reclaimed is STOPPED (kept, visible as TERMINATED) rather than deleted: orch sees
    #: the preemption, records it, then deletes the VM itself.
    spot_termination_action: str = "STOP"
    ssh_user: str = "orch"
    timeout_s: float = 30.0
    operation_timeout_s: float = 300.0
    retry_attempts: int = 6
    retry_initial_wait_s: float = 0.5
    retry_max_wait_s: float = 8.0
    retry_deadline_s: float = 60.0

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(attempts=self.retry_attempts, initial_wait_s=self.retry_initial_wait_s,
                           max_wait_s=self.retry_max_wait_s, deadline_s=self.retry_deadline_s)
