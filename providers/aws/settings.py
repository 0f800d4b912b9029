"""Settings for the AWS adapter. SDK-free: importing this module must not import boto3.

Credentials are deliberately absent: boto3's default chain finds them (environment, ``profile``,
SSO, instance role). Nothing here is secret, so settings can be printed and logged.
"""

from __future__ import annotations

import os

from pydantic import ConfigDict, Field

from providers.settings_base import RetrySettings, SshIngressSettings


def _default_regions() -> list[str]:
    region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or "us-east-1"
    return [region]


class Settings(RetrySettings, SshIngressSettings):
    """What the AWS adapter needs besides credentials.

    ``regions`` bounds everything: offers are only returned, launches only accepted, and instances only
    listed in these regions, so nothing orch launches can fall outside its garbage collection.
    ``endpoint_url`` points every client at one endpoint (tests: moto); None means AWS itself.
    ``ami`` wins over the lookup ``ami_owners`` + ``ami_name_pattern`` (newest match per region).
    ``security_group_ids`` given: the instances get exactly those. Not given: orch owns one security group
    per VPC and owner (``orch-<owner>``, tagged) that admits all traffic among its members (a gang's nodes)
    and TCP 22 from ``ssh_ingress_cidrs`` only (none by default), and deletes it once no instance uses it.
    ``instance_profile`` (a name or an ARN) gives the node an IAM role for the checkpoint store, so no
    credentials ride on the node.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    regions: list[str] = Field(default_factory=_default_regions, min_length=1)
    endpoint_url: str | None = None
    profile: str | None = None
    key_name: str | None = None
    security_group_ids: list[str] = Field(default_factory=list)
    subnet_id: str | None = None
    ami: str | None = None
    ami_owners: list[str] = Field(default_factory=lambda: ["amazon"])
    ami_name_pattern: str = "Deep Learning OSS Nvidia Driver AMI GPU PyTorch * (Ubuntu 22.04) *"
    instance_profile: str | None = None
    ssh_user: str = "ubuntu"
    root_device_name: str = "/dev/sda1"
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=60.0, gt=0)

    @property
    def login_user(self) -> str:
        return self.ssh_user
