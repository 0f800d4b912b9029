"""Building the configured providers from orch's config (the one place the CLI and daemon do it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.config.errors import ConfigError
from orchestrator.config.file import OrchConfig

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

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
            built[name] = create_provider(name, provider_settings(config, name))
        except ValidationError as exc:      # one the adapter's own construction raises
            raise settings_error(config, name, exc) from None
        except ImportError as exc:
            extra = entry(name).extra
            raise ConfigError(f"provider {name} needs {exc.name}: pip install 'orch[{extra}]'") from None
    return built


def build_live_providers(config: OrchConfig) -> dict[str, Provider]:
    """The enabled providers that price live (the registry's ``live_offers``), built: what ``--live`` asks. The
    others are not built (GCP's and Azure's SDKs cost seconds to import and price nothing live), but every
    enabled section is validated as building it would, so a bad one is still a ConfigError."""
    from providers.registry import prices_live

    check_provider_settings(config)
    return build_providers(config, {name for name in config.enabled_providers() if prices_live(name)})


def provider_settings(config: OrchConfig, name: str) -> BaseModel:
    """Provider ``name``'s section validated by its Settings (no section: its defaults), the one place a
    section's mapping is read; a bad section raises ConfigError (``settings_error``: file, line, field)."""
    from pydantic import ValidationError

    from providers.registry import load_settings

    try:
        return load_settings(name, config.provider_section(name))
    except ValidationError as exc:
        raise settings_error(config, name, exc) from None


def check_provider_settings(config: OrchConfig) -> None:
    """Validate every enabled provider's section as ``build_providers`` would, without building a client (no
    SDK imported): for commands that plan on the configured providers and must refuse what apply refuses."""
    for name in config.enabled_providers():
        provider_settings(config, name)


def settings_error(config: OrchConfig, name: str, exc: ValidationError) -> ConfigError:
    """A provider section's first validation error as one line: file, line, field path, what is wrong."""
    from orchestrator.config.errors import first_problem, unknown_key

    at, what, _ = first_problem(exc)
    if exc.errors()[0]["type"] == "extra_forbidden" and at and isinstance(at[-1], str):
        # Not pydantic's "Extra inputs are not permitted": the keys that are known there, or the one meant.
        what = unknown_key(at[-1], _known_keys(name, at[:-1]))
    return config.source().error(("providers", name, *at), what)


def _known_keys(name: str, at: tuple[str | int, ...]) -> list[str]:
    """The keys of provider ``name``'s settings at ``at`` (none where orch cannot tell)."""
    import typing

    from pydantic import BaseModel

    from providers.registry import settings_class

    def model_in(annotation: object) -> type[BaseModel] | None:     # Settings, list[HostSettings], X | None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return annotation
        return next((m for a in typing.get_args(annotation) if (m := model_in(a)) is not None), None)

    model: type[BaseModel] | None = settings_class(name)
    for part in at:
        if model is not None and isinstance(part, str):
            field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
            model = model_in(field.annotation) if field is not None else None
    return sorted(f.alias or n for n, f in model.model_fields.items()) if model is not None else []
