"""orch's own configuration: who owns the instances, and each provider's settings section.

File: ``$ORCH_CONFIG`` or ``$XDG_CONFIG_HOME/orch/config.yaml``. Credentials are NOT stored here:
each cloud's SDK finds them in its usual place (AWS profile/env, gcloud ADC, Azure CLI/env, API-key
env vars). A provider section holds endpoints, regions, project and such.

    owner: alice                # instances are tagged with it; default: the login name
    providers:
      aws: {regions: [us-east-1, us-west-2]}
      gcp: {project: my-proj, zones: [us-central1-a]}
      ssh: {hosts: [{name: box1, address: 10.0.0.5, user: ubuntu, gpu: RTX4090-24G, gpu_count: 2}]}
    budgets: [...]              # monthly $ caps and $/h ceilings (orchestrator/money/budgets.py)
    alerts: {webhooks: [...]}   # where alerts go (orchestrator/config/alerts.py)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from orchestrator.config.errors import ConfigError, ConfigLines, refuse_unknown_keys
from orchestrator.config.paths import config_path, data_dir  # noqa: F401 - re-exported: callers import both from here

if TYPE_CHECKING:
    from orchestrator.config.alerts import AlertSettings
    from orchestrator.money.budgets import Budget


def _default_owner() -> str:
    import getpass

    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = "orch"
    name = re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-") or "orch"
    if not name[0].isalpha():
        name = "u" + name
    return name[:31].rstrip("-")   # cut to 31, it must still end with a letter or digit (validate_owner)


_MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True)
class OrchConfig:
    """The parsed config. ``provider_sections`` are validated by each provider's Settings on use;
    ``budgets`` and ``alerts`` when the file is read."""

    owner: str
    provider_sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    path: Path | None = None
    budgets: tuple[Budget, ...] = ()
    alerts: AlertSettings | None = None  # None: no ``alerts:`` section
    #: The ``daemon:`` and ``catalog:`` sections as read (typed by config/daemon.py and config/catalog.py).
    sections: dict[str, Any] = field(default_factory=dict)
    #: Where each key is written, for errors found when a section is read later (None: from no file).
    lines: ConfigLines | None = None

    def source(self) -> ConfigLines:
        """The file and its lines, for a ConfigError ``<file>:<line>: <section>.<key>: …``."""
        return self.lines if self.lines is not None else ConfigLines(self.path)

    def enabled_providers(self) -> list[str]:
        """Providers named in the config and not ``enabled: false``, in orch's registry order."""
        from providers.registry import PROVIDER_NAMES

        return [
            n
            for n in PROVIDER_NAMES
            if n in self.provider_sections and self.provider_sections[n].get("enabled", True) is not False
        ]

    def provider_section(self, name: str) -> dict[str, Any]:
        """Provider ``name``'s section as written, less ``enabled``: what its Settings validate, and nothing
        else reads (orchestrator/config/providers.py ``provider_settings`` hands the typed settings on)."""
        section = dict(self.provider_sections.get(name) or {})
        section.pop("enabled", None)
        return section


def load_config(path: Path | None = None) -> OrchConfig:
    """Read the config file; a missing file means defaults (no providers configured).

    The file is read once per process while it is unchanged (the same path, inode, size and mtime): the
    daemon's, the service's and the catalog refresh's settings all come from that one reading. It is read
    as YAML 1.2 by the manifests' reader (orchestrator/inputs/yamlread.py: a regular file within a size
    cap, errors with their line), so YAML 1.1's ``yes``/``no``/``on``/``off`` and octals are refused with a
    hint instead of read as booleans or numbers."""
    path = path or config_path()
    try:
        st = path.stat()
    except FileNotFoundError:
        return OrchConfig(owner=os.environ.get("ORCH_OWNER") or _default_owner(), path=None)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {' '.join(str(exc).split())[:300]}") from None
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, os.environ.get("ORCH_OWNER"))
    cached = _READ.get(str(path))
    if cached is not None and cached[0] == key:
        return cached[1]
    config = _parse(path, *_read(path))
    _READ[str(path)] = (key, config)
    return config


#: The last reading of each config path, with the stat it was read at (see ``load_config``).
_READ: dict[str, tuple[tuple[object, ...], OrchConfig]] = {}


def _read(path: Path) -> tuple[dict[str, Any], ConfigLines]:
    """The file's one YAML 1.2 document as a mapping (empty: ``{}``) and the line of each key and value;
    ConfigError with the line otherwise."""
    from orchestrator.inputs.yaml12 import YamlInputError
    from orchestrator.inputs.yamlread import parse_yaml, read_regular_file

    try:
        # A regular file within a cap, read so (ORCH_CONFIG=/dev/zero or a FIFO must not hang or eat memory).
        docs = parse_yaml(read_regular_file(path, _MAX_CONFIG_BYTES, "config file"))
    except YamlInputError as exc:
        where = f"{path}:{exc.line}" if exc.line else str(path)
        where += f":{exc.col}" if exc.line and exc.col else ""
        raise ConfigError(
            f"{where}: cannot read config: {exc.message}" + (f" ({exc.hint})" if exc.hint else "")
        ) from None
    if len(docs) > 1:
        raise ConfigError(f"{path}:{docs[1].start.line}: the config is one YAML document (found {len(docs)})")
    raw = docs[0].data if docs else None
    if raw is None:
        return {}, ConfigLines(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}:{docs[0].start.line}: the config must be a mapping")
    lines = {at: pos.line for at, pos in docs[0].values.items()}
    lines.update({at: pos.line for at, pos in docs[0].keys.items()})  # a key's line over its block value's
    return raw, ConfigLines(path, MappingProxyType(lines))


def _parse(path: Path, raw: dict[str, Any], lines: ConfigLines) -> OrchConfig:
    from providers.base import validate_owner
    from providers.registry import UnknownProviderError, canonical_provider

    # A misspelt section (``budget:``, ``provider:``) would otherwise be read as no section at all: no budget
    # held, no provider configured, and nothing said.
    refuse_unknown_keys(raw, _SECTIONS, lines, ())
    owner = str(raw.get("owner") or os.environ.get("ORCH_OWNER") or _default_owner())
    try:
        validate_owner(owner)
    except ValueError as exc:
        if not raw.get("owner") and os.environ.get("ORCH_OWNER"):   # not the file's: it has no owner: line
            raise ConfigError(f"ORCH_OWNER: {exc} (set ORCH_OWNER to such a name, or unset it; or write owner: "
                              f"in {path})") from None
        raise lines.error(("owner",), str(exc)) from exc
    sections: dict[str, dict[str, Any]] = {}
    providers = raw.get("providers") or {}
    if not isinstance(providers, dict):   # ``providers: [aws]``: a list of names configures nothing
        raise lines.error(("providers",), "must be a mapping of provider names to their settings (e.g. "
                          "providers: {aws: {regions: [us-east-1]}, runpod: {}})")
    for name, section in providers.items():
        try:
            canonical = canonical_provider(str(name))
        except UnknownProviderError as exc:
            raise lines.error(("providers", str(name)), str(exc)) from exc
        if section is not None and not isinstance(section, dict):
            raise lines.error(("providers", str(name)), "must be a mapping")
        sections[canonical] = dict(section or {})
        if canonical != name:  # ``lambdalabs:`` written, ``providers.lambda`` read: its errors at its lines
            lines = lines.renamed(("providers", name), ("providers", canonical))
    budgets, alerts = _budgets_and_alerts(raw, lines)
    return OrchConfig(
        owner=owner,
        provider_sections=sections,
        path=path,
        budgets=budgets,
        alerts=alerts,
        sections={k: v for k, v in raw.items() if k in _READ_LATER},
        lines=lines,
    )


#: Sections read by their own modules from the one reading (config/daemon.py: ``daemon``; config/catalog.py).
_READ_LATER = frozenset({"daemon", "catalog"})
#: Every top-level key orch reads (docs/configuration.md).
_SECTIONS = frozenset({"owner", "providers", "budgets", "alerts", *_READ_LATER})


def _budgets_and_alerts(raw: dict[str, Any], lines: ConfigLines) -> tuple[tuple[Budget, ...], AlertSettings | None]:
    """The typed ``budgets:`` and ``alerts:`` sections (imported only when the file has them)."""
    budgets: tuple[Budget, ...] = ()
    alerts: AlertSettings | None = None
    if raw.get("budgets") is not None:
        from orchestrator.config.budgets import parse_budgets

        budgets = parse_budgets(raw["budgets"], lines)
    if raw.get("alerts") is not None:
        from orchestrator.config.alerts import parse_alerts

        alerts = parse_alerts(raw["alerts"], lines)
    return budgets, alerts
