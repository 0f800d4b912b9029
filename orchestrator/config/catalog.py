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
from typing import Annotated

from pydantic import BeforeValidator

from orchestrator.config.file import OrchConfig
from orchestrator.config.providers import provider_settings
from orchestrator.config.values import Section, read_section
from orchestrator.inputs.durations import HintedValueError, setting_duration
from providers.catalog.refresh.model import LAMBDA_URL, AwsSpotSettings, RefreshSettings


def _every(value: object) -> timedelta:
    """``6h``, ``30m``, ``90s``, ``1d`` or a number of seconds (orch's one duration parser); at least a minute."""
    try:
        every = setting_duration(value)
    except HintedValueError as exc:
        raise ValueError(f"not a duration: {value!r} ({exc.message}; e.g. 6h, 30m, 1d)") from None
    if every < timedelta(minutes=1):
        raise ValueError(f"{value!r} is under a minute")
    return every


def _positive(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"not a number: {value!r}") from None
    if not number > 0:
        raise ValueError("must be > 0")
    return number


def _url(value: object) -> str | None:
    return str(value) if value else None  # empty or null: the source's default


Every = Annotated[timedelta, BeforeValidator(_every)]
Positive = Annotated[float | None, BeforeValidator(_positive)]  # an explicit null is refused too
Url = Annotated[str | None, BeforeValidator(_url)]


class CatalogSection(Section):
    """The ``catalog:`` mapping as written; a ``None`` URL or timeout: the refresh's own default."""

    refresh_every: Every = timedelta(hours=6)
    timeout_s: Positive = None
    http_timeout_s: Positive = None
    gpuhunt_url: Url = None
    azure_prices_url: Url = None
    vast_url: Url = None
    runpod_url: Url = None
    lambda_url: Url = None


def read_catalog_section(config: OrchConfig) -> CatalogSection:
    """The file's ``catalog:`` section (absent: every default); a ConfigError
    ``<path>:<line>: catalog.<key>: <what>``."""
    section = config.sections.get("catalog")
    if section is None:
        return CatalogSection()
    return read_section(CatalogSection, section, config.source(), ("catalog",))


def _aws_spot(config: OrchConfig) -> AwsSpotSettings | None:
    if "aws" not in config.enabled_providers():
        return None
    from providers.aws.settings import Settings

    aws = provider_settings(config, "aws")
    assert isinstance(aws, Settings)    # the registry's class for "aws"
    return AwsSpotSettings(tuple(aws.regions), aws.endpoint_url, aws.profile)


def _lambda(config: OrchConfig) -> tuple[str | None, str | None]:
    """(API key, base URL) as the Lambda adapter would use them."""
    from providers.lambdalabs.settings import Settings, default_api_key

    if "lambda" not in config.enabled_providers():
        key = default_api_key()
        return (key.get_secret_value() if key else None), None
    settings = provider_settings(config, "lambda")
    assert isinstance(settings, Settings)    # the registry's class for "lambda"
    return (settings.api_key.get_secret_value() if settings.api_key else None), settings.base_url


def refresh_settings(config: OrchConfig) -> RefreshSettings:
    """The refresh's settings from the config; raises ConfigError naming the bad key."""
    section = read_catalog_section(config)
    key, lambda_base = _lambda(config)
    base = RefreshSettings()
    return RefreshSettings(
        gpuhunt_url=section.gpuhunt_url,
        azure_prices_url=section.azure_prices_url or base.azure_prices_url,
        vast_url=section.vast_url or base.vast_url,
        runpod_url=section.runpod_url or base.runpod_url,
        lambda_url=section.lambda_url or lambda_base or LAMBDA_URL,
        lambda_api_key=key,
        aws_spot=_aws_spot(config),
        http_timeout_s=section.http_timeout_s or base.http_timeout_s,
        provider_timeout_s=section.timeout_s or base.provider_timeout_s,
        every=section.refresh_every,
    )
