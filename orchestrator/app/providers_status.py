"""Is each provider usable from here, and if not, exactly why and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orchestrator.config.file import OrchConfig


class ProviderReadiness(StrEnum):
    READY = "ready"
    NOT_CONFIGURED = "not configured"
    SDK_MISSING = "sdk missing"
    CREDENTIALS = "credentials"
    CONFIG_ERROR = "config error"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True, slots=True)
class ProviderStatus:
    name: str
    display: str
    readiness: ProviderReadiness
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"provider": self.name, "display": self.display, "status": self.readiness.value,
                "detail": self.detail}


def provider_status(config: OrchConfig, name: str) -> ProviderStatus:
    """Check one provider: configured? SDK importable? settings valid? credentials accepted?

    Never raises for a provider's failure: it is reported. Credentials are never printed.
    """
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.providers import provider_settings
    from providers.errors import AuthError, ProviderError
    from providers.registry import create_provider, entry

    e = entry(name)
    if name not in config.enabled_providers():
        return ProviderStatus(name, e.display, ProviderReadiness.NOT_CONFIGURED, e.setup_hint)
    try:
        settings = provider_settings(config, name)
    except ConfigError as exc:
        # The same words as every other command's refusal of the section: its file and line, the field as
        # written (``hosts[0]``), no pydantic "Value error, " prefix.
        return ProviderStatus(name, e.display, ProviderReadiness.CONFIG_ERROR, str(exc))
    try:
        provider = create_provider(name, settings)
    except ImportError as exc:
        fix = f"pip install 'orch[{e.extra}]'" if e.extra else "reinstall orch"
        return ProviderStatus(name, e.display, ProviderReadiness.SDK_MISSING, f"{exc.name or exc}: {fix}")
    try:
        provider.check_credentials()
    except AuthError as exc:
        return ProviderStatus(name, e.display, ProviderReadiness.CREDENTIALS,
                              f"{exc.message}" + (f"; fix: {exc.hint}" if exc.hint else f"; {e.setup_hint}"))
    except ProviderError as exc:
        return ProviderStatus(name, e.display, ProviderReadiness.UNREACHABLE, str(exc))
    finally:
        provider.close()
    if name == "ssh":   # no cloud to accept a key: the key file was read, the hosts were not dialled
        from orchestrator.words import plural

        hosts = plural(len(getattr(settings, "hosts", ())), "host")
        return ProviderStatus(name, e.display, ProviderReadiness.READY,
                              f"key readable; {hosts} declared, not contacted (`orch smoke --provider ssh` "
                              "reaches them)")
    return ProviderStatus(name, e.display, ProviderReadiness.READY, "credentials accepted")
