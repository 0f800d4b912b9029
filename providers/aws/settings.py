"""Settings for the AWS adapter (SDK-free). Credentials are NOT here: boto3's default chain finds them
(environment, ``~/.aws`` profiles, SSO, instance roles)."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from providers.retry import RetryPolicy


def _default_regions() -> list[str]:
    return [os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or "us-east-1"]


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    regions: list[str] = Field(default_factory=_default_regions, min_length=1)
    profile: str | None = None                 # a named profile in ~/.aws/config
    endpoint_url: str | None = None            # an EC2-compatible endpoint (tests: moto on 127.0.0.1)
    amis: dict[str, str] = Field(default_factory=dict)   # region -> AMI id; else the newest DLAMI is looked up
    ami_name_pattern: str = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)*"
    key_name: str | None = None                # an existing key pair; else the launch's public key is imported
    security_group_ids: list[str] = Field(default_factory=list)
    subnet_ids: dict[str, str] = Field(default_factory=dict)   # region -> subnet id
    root_device: str = "/dev/sda1"
    ssh_user: str = "ubuntu"
    timeout_s: float = 30.0
    spot_price_max_age_h: float = 24.0         # older spot price history is stale, not live
    retry_attempts: int = 6
    retry_initial_wait_s: float = 0.5
    retry_max_wait_s: float = 8.0
    retry_deadline_s: float = 60.0

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(attempts=self.retry_attempts, initial_wait_s=self.retry_initial_wait_s,
                           max_wait_s=self.retry_max_wait_s, deadline_s=self.retry_deadline_s)
