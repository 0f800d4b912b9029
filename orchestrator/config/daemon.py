"""The ``daemon:`` section of orch's config as a pydantic model, each key overridden by its ``ORCH_*`` variable
(pydantic-settings: ``daemon.boot_timeout_s`` by ``ORCH_BOOT_TIMEOUT_S``; an empty variable counts as unset).

Durations go through orch's one duration parser (``orchestrator.inputs.durations.setting_duration``): a number
of seconds or a number with a unit (``90``, ``20m``, ``1h30m``). Every error names the key and its variable.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from orchestrator.config.errors import ConfigError, ConfigLines, first_problem, refuse_unknown_keys
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
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return env_settings, init_settings  # an ORCH_* variable wins over the file; no .env, no secrets dir


KEYS = tuple(DaemonSection.model_fields)


def env_name(key: str) -> str:
    return "ORCH_" + key.upper()


def read_daemon_section(section: dict[str, Any], lines: ConfigLines) -> DaemonSection:
    """``section`` (the file's ``daemon:`` mapping, ``{}`` when absent) with the environment over it; a
    ConfigError naming ``daemon.<key> (ORCH_<KEY>)`` for a bad value (after ``<path>:<line>:`` when the value is
    the file's), ``<path>:<line>: daemon.<key>`` for an unknown key."""
    refuse_unknown_keys(section, KEYS, lines, ("daemon",))
    try:
        return DaemonSection(**section)
    except ValidationError as exc:
        at, what, given = first_problem(exc)
        key = str(at[0]) if at else "?"
        if key.endswith("_s"):  # the durations
            what = f"not a number of seconds or a duration ({what})"
        problem = f"daemon.{key} ({env_name(key)}): {what}: {_shown(given)}"
        if key in section and not os.environ.get(env_name(key)):  # the file's value, not the variable's
            problem = f"{lines.where(('daemon', key), ())}{problem}"
        raise ConfigError(problem) from None


def _shown(value: object) -> str:
    """A bad value for an error line: escaped (no control characters reach the terminal) and shortened."""
    text = ascii(value) if isinstance(value, str) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."
