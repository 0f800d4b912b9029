"""The ``alerts:`` section of orch's config: where alerts go.

    alerts:
      webhooks:
        - name: ops-slack                   # how logs name it (default: the URL's host)
          url_env: ORCH_SLACK_WEBHOOK       # the URL from this environment variable (keeps the token out of
                                            #   the file), or url: https://hooks.slack.com/services/...
          format: slack                     # slack: {"text": ...}; json (default): {kind, job, provider,
                                            #   message, time}
          events: [preempted, budget-threshold, job-failed]   # default: every kind
      queue_size: 1000                      # alerts waiting per webhook; more are dropped (and counted)
      timeout_s: 10                         # one HTTP request
      attempts: 5                           # tries per alert, with exponential backoff between them

A webhook URL is secret: orch logs its scheme and host only, never its path, query or user info.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BeforeValidator, ConfigDict, model_validator

from orchestrator.alerts.model import AlertKind
from orchestrator.alerts.redact import WebhookUrl
from orchestrator.config.errors import ConfigError, ConfigLines, KeyPath
from orchestrator.config.values import Section, listed, named, positive, read_section, refusal, text, whole


class WebhookFormat(StrEnum):
    SLACK = "slack"
    JSON = "json"


@dataclass(frozen=True, slots=True)
class UrlSource:
    """Where a webhook's URL comes from: written in the file, or an environment variable read at start."""

    url: WebhookUrl | None = None
    env: str | None = None

    def resolve(self, where: str) -> WebhookUrl:
        if self.url is not None:
            return self.url
        value = os.environ.get(self.env or "", "").strip()
        if not value:
            raise ConfigError(f"{where}: url_env: ${self.env} is not set (it holds the webhook's URL)")
        if not _is_http_url(value):
            raise ConfigError(f"{where}: url_env: {_NOT_A_URL}")
        return WebhookUrl(value)


@dataclass(frozen=True, slots=True)
class Webhook:
    name: str
    source: UrlSource
    format: WebhookFormat = WebhookFormat.JSON
    kinds: frozenset[AlertKind] = frozenset(AlertKind)
    where: str = "alerts.webhooks"  # ``<file>:<line>: alerts.webhooks.<name>``, for errors raised at resolve


@dataclass(frozen=True, slots=True)
class AlertSettings:
    webhooks: tuple[Webhook, ...] = ()
    queue_size: int = 1000
    timeout_s: float = 10.0
    attempts: int = 5


_NOT_A_URL = "not an http(s) URL with a host (the value is not shown: it may hold a token)"


def _url(value: object) -> WebhookUrl:
    """http(s) with a host; the message never repeats the URL (it may hold a token)."""
    url = text(value)
    if not _is_http_url(url):
        raise ValueError(_NOT_A_URL)
    return WebhookUrl(url)


def _format(value: object) -> WebhookFormat:
    fmt = text(value).lower()
    try:
        return WebhookFormat(fmt)
    except ValueError:
        raise ValueError(f"{fmt!r}: choose slack or json") from None


def _kinds(value: object) -> frozenset[AlertKind]:
    kinds: set[AlertKind] = set()
    for i, item in enumerate(listed(value)):
        try:
            name = text(item)
        except ValueError as exc:
            raise refusal(str(exc), i) from None
        try:
            kinds.add(AlertKind(name))
        except ValueError:
            raise refusal(f"{name!r}: not an alert (choose from {', '.join(k.value for k in AlertKind)})", i) from None
    if not kinds:
        raise ValueError("an empty list sends nothing; leave events out for every kind")
    return frozenset(kinds)


Text = Annotated[str | None, BeforeValidator(text)]


class WebhookSection(Section):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)  # WebhookUrl

    name: Text = None
    url: Annotated[WebhookUrl | None, BeforeValidator(_url)] = None
    url_env: Text = None
    format: Annotated[WebhookFormat, BeforeValidator(_format)] = WebhookFormat.JSON
    events: Annotated[frozenset[AlertKind], BeforeValidator(_kinds)] = frozenset(AlertKind)

    @model_validator(mode="before")
    @classmethod
    def _one_url(cls, data: Any) -> Any:
        if isinstance(data, dict) and ("url" in data) == ("url_env" in data):
            raise refusal("give url or url_env (one of them)")
        return data

    def default_name(self) -> str:
        return self.url.host_only if self.url is not None else f"${self.url_env}"


class AlertsSection(Section):
    webhooks: Annotated[tuple[WebhookSection, ...], BeforeValidator(lambda v: listed(v or []))] = ()
    queue_size: Annotated[int, BeforeValidator(whole)] = 1000
    timeout_s: Annotated[float, BeforeValidator(positive)] = 10.0
    attempts: Annotated[int, BeforeValidator(whole)] = 5

    @model_validator(mode="after")
    def _distinct(self) -> AlertsSection:
        seen: set[str] = set()
        for i, hook in enumerate(self.webhooks):
            name = hook.name or hook.default_name()
            if name in seen:
                raise refusal("two webhooks have this name", "webhooks", i)
            seen.add(name)
        return self


def parse_alerts(raw: object, lines: ConfigLines) -> AlertSettings:
    """The ``alerts:`` section (absent/None: no webhooks); a ConfigError names the line and the key."""
    if raw is None:
        return AlertSettings()
    items = raw.get("webhooks") if isinstance(raw, dict) else None

    def shown(at: KeyPath) -> KeyPath:
        return named(at, 2, items, lambda name: bool(name))

    section = read_section(AlertsSection, raw, lines, ("alerts",), shown)
    hooks = tuple(
        Webhook(
            h.name or h.default_name(),
            UrlSource(h.url, h.url_env),
            h.format,
            h.events,
            lines.where(("alerts", "webhooks", i), shown(("alerts", "webhooks", i))),
        )
        for i, h in enumerate(section.webhooks)
    )
    return AlertSettings(hooks, section.queue_size, section.timeout_s, section.attempts)


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        return False
