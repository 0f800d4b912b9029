"""Lambda Cloud settings: endpoint, SSH key name, client-side rate limits, retries. No SDK, no I/O at import.

The API key comes from, in order: the ``api_key`` field, ``$LAMBDA_API_KEY``, or the key file SkyPilot
and other Lambda tools use, ``~/.lambda_cloud/lambda_keys`` (lines ``api_key = <key>``). It is held as a
SecretStr so it never shows in reprs, logs or error messages.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ConfigDict, Field, SecretStr

from providers.settings_base import RetrySettings

KEY_FILE = Path("~/.lambda_cloud/lambda_keys")


def read_key_file(path: Path) -> str | None:
    """The ``api_key = ...`` value of a Lambda key file, or None when absent or unreadable."""
    try:
        text = path.expanduser().read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "api_key" and value.strip():
            return value.strip()
    return None


def default_api_key() -> SecretStr | None:
    value = os.environ.get("LAMBDA_API_KEY") or read_key_file(KEY_FILE)
    return SecretStr(value) if value else None


#: The longest SSH key name Lambda takes (AddSSHKeyRequest.name maxLength, OpenAPI 1.8.3).
SSH_KEY_NAME_MAX = 64


class Settings(RetrySettings):
    """The ``providers.lambda`` section of orch's config."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    api_key: SecretStr | None = Field(default_factory=default_api_key)
    base_url: str = "https://cloud.lambda.ai/api/v1"
    #: AddSSHKeyRequest.name: 1-64 characters (Lambda OpenAPI 1.8.3); a longer one is refused at every launch.
    ssh_key_name: str = Field("orch", min_length=1, max_length=SSH_KEY_NAME_MAX)
    timeout_s: float = 30.0
    # Lambda's documented limits (OpenAPI 1.8.3 info): about one request per second, and one launch per
    # 12 seconds (five a minute). orch waits for its turn rather than collecting 429s.
    min_interval_s: float = 1.0
    launch_interval_s: float = 12.0

