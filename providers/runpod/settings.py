"""RunPod settings: GraphQL endpoint, cloud type, pod image and disks, retries. No SDK, no I/O at import.

The API key comes from the ``api_key`` field, ``$RUNPOD_API_KEY``, or the file RunPod's own CLI
(``runpod config``) writes, ``~/.runpod/config.toml`` (``[default] api_key = "..."``). It is a SecretStr:
never shown in reprs, logs or errors.

RunPod retired spot (interruptible) pods in September 2026: orch rents on-demand pods only.
"""

from __future__ import annotations

import os
import tomllib
from enum import StrEnum
from pathlib import Path

from pydantic import ConfigDict, Field, SecretStr

from providers.settings_base import RetrySettings

CONFIG_FILE = Path("~/.runpod/config.toml")


class CloudType(StrEnum):
    SECURE = "SECURE"
    COMMUNITY = "COMMUNITY"
    ALL = "ALL"


def read_config_file(path: Path, profile: str = "default") -> str | None:
    """The ``api_key`` of a RunPod CLI profile, or None when the file is absent or unreadable."""
    try:
        data = tomllib.loads(path.expanduser().read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    value = (data.get(profile) or {}).get("api_key")
    return value if isinstance(value, str) and value else None


def default_api_key() -> SecretStr | None:
    value = os.environ.get("RUNPOD_API_KEY") or read_config_file(CONFIG_FILE)
    return SecretStr(value) if value else None


class Settings(RetrySettings):
    """The ``providers.runpod`` section of orch's config."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    api_key: SecretStr | None = Field(default_factory=default_api_key)
    graphql_url: str = "https://api.runpod.io/graphql"
    cloud_type: CloudType = CloudType.SECURE
    image: str = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"
    container_disk_gb: int = 50
    volume_gb: int | None = None           # when the job names no resources.disk_gb; None: 100 GB
    volume_mount_path: str = "/workspace"
    # The images' sshd listens on 22 (startSsh); 10022 is kept for images that run their own sshd there.
    ports: str = "22/tcp,10022/tcp"
    timeout_s: float = 30.0
    min_interval_s: float = 0.0

