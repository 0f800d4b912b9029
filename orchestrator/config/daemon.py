"""The ``daemon:`` section of orch's config as a pydantic model, each key overridden by its ``ORCH_*`` variable
(pydantic-settings: ``daemon.boot_timeout_s`` by ``ORCH_BOOT_TIMEOUT_S``; an empty variable counts as unset).

Durations go through orch's one duration parser (``orchestrator.inputs.durations.setting_duration``): a number
of seconds or a number with a unit (``90``, ``20m``, ``1h30m``). Every error names the key and its variable.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from orchestrator.config.errors import ConfigError, first_problem, refuse_unknown_keys
from orchestrator.inputs.durations import setting_duration


def _duration(value: object) -> timedelta | None:
    return None if value is None else setting_duration(value)


Duration = Annotated[timedelta | None, BeforeValidator(_duration)]


class DaemonSection(BaseSettings):
    """What the file and the environment say; ``None``/empty: the engine's default (``ServiceSettings``)."""

    model_config = SettingsConfigDict(env_prefix="ORCH_", extra="forbid", frozen=True, env_ignore_empty=True)

    orphan_grace_s: Duration = None
    notice_drain_s: Duration = None
    lease_ttl_s: Duration = None
    use_live_offers: bool = False
    ssh_public_key: str = ""
    ssh_private_key: str = ""
    recovery_policy: str = ""
    restart_overhead_s: Duration = None
    state_store: str = ""
    store_endpoint: str = ""
    boot_timeout_s: Duration = None
    heartbeat_timeout_s: Duration = None
    unreachable_grace_s: Duration = None

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return env_settings, init_settings          # an ORCH_* variable wins over the file; no .env, no secrets dir


KEYS = tuple(DaemonSection.model_fields)


def env_name(key: str) -> str:
    return "ORCH_" + key.upper()


def read_daemon_section(section: dict[str, Any], path: object) -> DaemonSection:
    """``section`` (the file's ``daemon:`` mapping, ``{}`` when absent) with the environment over it; a
    ConfigError naming ``daemon.<key> (ORCH_<KEY>)`` for a bad value, ``<path>: daemon.<key>`` for an unknown key."""
    refuse_unknown_keys(section, KEYS, f"{path}: daemon")
    try:
        return DaemonSection(**section)
    except ValidationError as exc:
        key, what, given = first_problem(exc)
        if key.endswith("_s"):          # the durations
            what = f"not a number of seconds or a duration ({what})"
        raise ConfigError(f"daemon.{key} ({env_name(key)}): {what}: {_shown(given)}") from None


def _shown(value: object) -> str:
    """A bad value for an error line: escaped (no control characters reach the terminal) and shortened."""
    text = ascii(value) if isinstance(value, str) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."
