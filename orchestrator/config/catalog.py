"""The ``catalog:`` section of orch's config, as the refresh's settings.

    catalog:
      refresh_every: 6h          # the daemon's refresh period (s, m, h, d; default 6h)
      timeout_s: 300             # a provider's whole refresh; one HTTP call gets http_timeout_s (30)
      gpuhunt_url: https://...   # a mirror of gpuhunt's published catalogs (default: $GPUHUNT_CATALOG_URL,
                                 #   else gpuhunt's bucket)
      azure_prices_url / vast_url / runpod_url / lambda_url: the sources' addresses (default: the real ones)

Per-zone AWS spot prices are asked for when ``providers.aws`` is configured (its regions, endpoint_url and
profile; credentials from boto3's usual chain). Live Lambda prices use the Lambda API key the Lambda adapter
would use (``providers.lambda.api_key``, ``$LAMBDA_API_KEY`` or ``~/.lambda_cloud/lambda_keys``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from orchestrator.config.errors import ConfigError
from orchestrator.config.file import OrchConfig
from orchestrator.inputs.durations import HintedValueError, setting_duration
from providers.catalog.refresh.model import LAMBDA_URL, AwsSpotSettings, RefreshSettings

_KEYS = {"refresh_every", "timeout_s", "http_timeout_s", "gpuhunt_url", "azure_prices_url", "vast_url",
         "runpod_url", "lambda_url"}


def parse_duration(text: object, where: str) -> timedelta:
    """``6h``, ``30m``, ``90s``, ``1d`` or a number of seconds (orch's one duration parser); at least a minute."""
    try:
        every = setting_duration(text)
    except HintedValueError as exc:
        raise ConfigError(f"{where}: not a duration: {text!r} ({exc.message}; e.g. 6h, 30m, 1d)") from None
    if every < timedelta(minutes=1):
        raise ConfigError(f"{where}: {text!r} is under a minute")
    return every


def _section(config: OrchConfig) -> dict[str, Any]:
    section = config.sections.get("catalog")
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError(f"{config.path}: catalog: must be a mapping")
    unknown = sorted(set(section) - _KEYS)
    if unknown:
        raise ConfigError(f"{config.path}: catalog.{unknown[0]}: unknown key (known: {', '.join(sorted(_KEYS))})")
    return dict(section)


def _positive(section: dict[str, Any], key: str, default: float, where: str) -> float:
    try:
        value = float(section.get(key, default))
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: catalog.{key}: not a number: {section[key]!r}") from None
    if not value > 0:
        raise ConfigError(f"{where}: catalog.{key}: must be > 0")
    return value


def _aws_spot(config: OrchConfig) -> AwsSpotSettings | None:
    if "aws" not in config.enabled_providers():
        return None
    from providers.aws.settings import Settings

    try:
        aws = Settings(**config.provider_settings("aws"))
    except ValueError as exc:
        raise ConfigError(f"{config.path}: providers.aws: {exc}") from None
    return AwsSpotSettings(tuple(aws.regions), aws.endpoint_url, aws.profile)


def _lambda(config: OrchConfig) -> tuple[str | None, str | None]:
    """(API key, base URL) as the Lambda adapter would use them."""
    from providers.lambdalabs.settings import Settings, default_api_key

    if "lambda" not in config.enabled_providers():
        key = default_api_key()
        return (key.get_secret_value() if key else None), None
    try:
        settings = Settings(**config.provider_settings("lambda"))
    except ValueError as exc:
        raise ConfigError(f"{config.path}: providers.lambda: {exc}") from None
    return (settings.api_key.get_secret_value() if settings.api_key else None), settings.base_url


def refresh_settings(config: OrchConfig) -> RefreshSettings:
    """The refresh's settings from the config; raises ConfigError naming the bad key."""
    section = _section(config)
    where = str(config.path)
    every = parse_duration(section["refresh_every"], f"{where}: catalog.refresh_every") \
        if "refresh_every" in section else timedelta(hours=6)
    key, lambda_base = _lambda(config)
    base = RefreshSettings()
    return RefreshSettings(
        gpuhunt_url=section.get("gpuhunt_url") or None,
        azure_prices_url=str(section.get("azure_prices_url") or base.azure_prices_url),
        vast_url=str(section.get("vast_url") or base.vast_url),
        runpod_url=str(section.get("runpod_url") or base.runpod_url),
        lambda_url=str(section.get("lambda_url") or lambda_base or LAMBDA_URL),
        lambda_api_key=key,
        aws_spot=_aws_spot(config),
        http_timeout_s=_positive(section, "http_timeout_s", base.http_timeout_s, where),
        provider_timeout_s=_positive(section, "timeout_s", base.provider_timeout_s, where),
        every=every,
    )
