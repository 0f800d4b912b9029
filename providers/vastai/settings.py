"""Settings for the Vast.ai adapter: endpoint, credentials and the offer filters a careful user sets.

SDK-free (pydantic only). The API key comes from, in order: the ``api_key`` field, ``$VAST_API_KEY``,
then the files the vast CLI writes: ``$XDG_CONFIG_HOME/vastai/vast_api_key`` (the CLI's current
place, ``~/.config/vastai/vast_api_key`` by default) and the legacy ``~/.vast_api_key``.
The key is a SecretStr: it is never printed, logged or put in a repr.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ConfigDict, Field, SecretStr, model_validator

from providers.settings_base import RetrySettings

ENV_API_KEY = "VAST_API_KEY"


def cli_key_files() -> tuple[Path, ...]:
    """Where the vast CLI keeps the key (vast-cli ``vastai/cli/util.py``: APIKEY_FILE, APIKEY_FILE_HOME)."""
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return (config_home / "vastai" / "vast_api_key", Path.home() / ".vast_api_key")


def discover_api_key() -> SecretStr | None:
    """The key from the environment or the CLI's files, or None when none is set up."""
    value = os.environ.get(ENV_API_KEY, "").strip()
    if value:
        return SecretStr(value)
    for path in cli_key_files():
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text:
            return SecretStr(text)
    return None


class Settings(RetrySettings):
    """What the Vast adapter needs. Defaults are the conservative filters the vast CLI applies, tightened."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    api_key: SecretStr | None = None
    base_url: str = "https://console.vast.ai/api/v0"
    timeout_s: float = 30.0

    # Offer filters (sent to POST /bundles/ as {"field": {"op": value}}).
    verified: bool | None = True                    # None: verified and unverified machines alike
    rentable: bool = True
    rented: bool = False
    min_reliability: float = Field(0.98, ge=0.0, le=1.0)
    min_direct_ports: int = Field(1, ge=0)          # direct_port_count >= this: ssh without Vast's proxy
    min_cuda: float | None = 12.1                   # cuda_max_good >= this
    min_inet_down_mbps: float | None = 200.0        # inet_down >= this (Mb/s as Vast reports it)
    offer_limit: int = Field(64, ge=1, le=1000)

    # What a launch asks for.
    #: the disk a job that names no resources.disk_gb rents, and its offers are priced with (Vast bills disk
    #: by the hour, so the quote and the launch use the same one).
    disk_gb: int = Field(100, ge=8)
    image: str = "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"
    ssh_container_port: int = 10022                 # mapped with "-p 10022:10022" (direct ssh)
    #: interruptible bid = min_bid * bid_markup: what a spot offer is quoted at and what Vast bills (pay-as-bid);
    #: a spec's max_price_hr only caps it (offers.spot_bid)
    bid_markup: float = Field(1.1, ge=1.0)

    # Client behaviour.
    min_interval_s: float = Field(0.25, ge=0.0)     # Vast answers 429 to bursts; space calls out

    @model_validator(mode="after")
    def _fill_api_key(self) -> Settings:
        if self.api_key is None:
            object.__setattr__(self, "api_key", discover_api_key())
        return self

