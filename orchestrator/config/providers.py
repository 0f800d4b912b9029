"""Building the configured providers from orch's config (the one place the CLI and daemon do it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.config.errors import ConfigError
from orchestrator.config.file import OrchConfig

if TYPE_CHECKING:
    from pydantic import ValidationError

    from providers.base import Provider


def build_providers(config: OrchConfig, only: set[str] | None = None) -> dict[str, Provider]:
    """Every enabled provider (or those in ``only``), built; a bad section raises ConfigError."""
    from pydantic import ValidationError

    from providers.registry import create_provider, entry

    built: dict[str, Provider] = {}
    for name in config.enabled_providers():
        if only is not None and name not in only:
            continue
        try:
            built[name] = create_provider(name, config.provider_settings(name))
        except ValidationError as exc:
            raise settings_error(config, name, exc) from None
        except ImportError as exc:
            extra = entry(name).extra
            raise ConfigError(f"provider {name} needs {exc.name}: pip install 'orch[{extra}]'") from None
    return built


def settings_error(config: OrchConfig, name: str, exc: ValidationError) -> ConfigError:
    """A provider section's first validation error as one line: file, line, field path, what is wrong."""
    from orchestrator.config.errors import first_problem

    at, what, _ = first_problem(exc)
    return config.source().error(("providers", name, *at), what)
