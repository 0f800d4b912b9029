"""orch's own configuration: who owns the instances, and each provider's settings section.

File: ``$ORCH_CONFIG`` or ``$XDG_CONFIG_HOME/orch/config.yaml``. Credentials are NOT stored here:
each cloud's SDK finds them in its usual place (AWS profile/env, gcloud ADC, Azure CLI/env, API-key
env vars). A provider section holds endpoints, regions, project and such.

    owner: alice                # instances are tagged with it; default: the login name
    providers:
      aws: {regions: [us-east-1, us-west-2]}
      gcp: {project: my-proj, zones: [us-central1-a]}
      ssh: {hosts: [{name: box1, address: 10.0.0.5, user: ubuntu, gpu: RTX4090-24G, gpu_count: 2}]}
    budgets: [...]              # monthly $ caps and $/h ceilings (orchestrator/budgets.py)
    alerts: {webhooks: [...]}   # where alerts go (orchestrator/alerts/config.py)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.config_errors import ConfigError

if TYPE_CHECKING:
    from orchestrator.alerts.config import AlertSettings
    from orchestrator.budgets import Budget


def config_path() -> Path:
    explicit = os.environ.get("ORCH_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "orch" / "config.yaml"


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "orch"


def _default_owner() -> str:
    import getpass

    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = "orch"
    name = re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-") or "orch"
    if not name[0].isalpha():
        name = "u" + name
    return name[:31]


_MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True)
class OrchConfig:
    """The parsed config. ``provider_sections`` are validated by each provider's Settings on use;
    ``budgets`` and ``alerts`` when the file is read."""

    owner: str
    provider_sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    path: Path | None = None
    budgets: tuple[Budget, ...] = ()
    alerts: AlertSettings | None = None      # None: no ``alerts:`` section

    def enabled_providers(self) -> list[str]:
        """Providers named in the config and not ``enabled: false``, in orch's registry order."""
        from providers.registry import PROVIDER_NAMES

        return [n for n in PROVIDER_NAMES
                if n in self.provider_sections and self.provider_sections[n].get("enabled", True) is not False]

    def provider_settings(self, name: str) -> dict[str, Any]:
        section = dict(self.provider_sections.get(name) or {})
        section.pop("enabled", None)
        return section


def load_config(path: Path | None = None) -> OrchConfig:
    """Read the config file; a missing file means defaults (no providers configured)."""
    from orchestrator.inputfiles import InputFileError, read_text_file
    from providers.base import validate_owner
    from providers.registry import UnknownProviderError, canonical_provider

    path = path or config_path()
    try:
        exists = path.exists()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {' '.join(str(exc).split())[:300]}") from None
    if not exists:
        return OrchConfig(owner=os.environ.get("ORCH_OWNER") or _default_owner(), path=None)
    import yaml  # ~50 ms: only when there is a file to read (`orch quote` checks the path first)

    try:
        # A regular file within a cap, read so (ORCH_CONFIG=/dev/zero or a FIFO must not hang or eat memory).
        raw = yaml.safe_load(read_text_file(path, _MAX_CONFIG_BYTES, "config file")) or {}
    except InputFileError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.message}") from None
    except (OSError, yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"{path}: cannot read config: {' '.join(str(exc).split())[:300]}") from None
    except ValueError:       # PyYAML's int() of a number over Python's 4,300-digit limit
        raise ConfigError(f"{path}: cannot read config: a number in it has over 4,300 digits") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the config must be a mapping")
    owner = str(raw.get("owner") or os.environ.get("ORCH_OWNER") or _default_owner())
    try:
        validate_owner(owner)
    except ValueError as exc:
        raise ConfigError(f"{path}: owner: {exc}") from exc
    sections: dict[str, dict[str, Any]] = {}
    for name, section in (raw.get("providers") or {}).items():
        try:
            canonical = canonical_provider(str(name))
        except UnknownProviderError as exc:
            raise ConfigError(f"{path}: providers.{name}: {exc}") from exc
        if section is not None and not isinstance(section, dict):
            raise ConfigError(f"{path}: providers.{name}: must be a mapping")
        sections[canonical] = dict(section or {})
    budgets, alerts = _budgets_and_alerts(raw, path)
    return OrchConfig(owner=owner, provider_sections=sections, path=path, budgets=budgets, alerts=alerts)


def _budgets_and_alerts(raw: dict[str, Any], path: Path) -> tuple[tuple[Budget, ...], AlertSettings | None]:
    """The typed ``budgets:`` and ``alerts:`` sections (imported only when the file has them)."""
    budgets: tuple[Budget, ...] = ()
    alerts: AlertSettings | None = None
    if raw.get("budgets") is not None:
        from orchestrator.budgets_config import parse_budgets

        budgets = parse_budgets(raw["budgets"], str(path))
    if raw.get("alerts") is not None:
        from orchestrator.alerts.config import parse_alerts

        alerts = parse_alerts(raw["alerts"], str(path))
    return budgets, alerts
