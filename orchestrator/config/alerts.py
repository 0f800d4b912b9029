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
from urllib.parse import urlsplit

from orchestrator.alerts.model import AlertKind
from orchestrator.alerts.redact import WebhookUrl
from orchestrator.config.errors import ConfigError
from orchestrator.config.values import Where, mapping, positive, sequence, text, whole

_KEYS = frozenset({"webhooks", "queue_size", "timeout_s", "attempts"})
_WEBHOOK_KEYS = frozenset({"name", "url", "url_env", "format", "events"})


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
        _check_url(value, where)
        return WebhookUrl(value)


@dataclass(frozen=True, slots=True)
class Webhook:
    name: str
    source: UrlSource
    format: WebhookFormat = WebhookFormat.JSON
    kinds: frozenset[AlertKind] = frozenset(AlertKind)
    where: str = "alerts.webhooks"      # for errors raised when the URL is resolved


@dataclass(frozen=True, slots=True)
class AlertSettings:
    webhooks: tuple[Webhook, ...] = ()
    queue_size: int = 1000
    timeout_s: float = 10.0
    attempts: int = 5


def parse_alerts(raw: object, path: str) -> AlertSettings:
    """The ``alerts:`` section (absent/None: no webhooks); ConfigError names the bad key."""
    if raw is None:
        return AlertSettings()
    where = Where(path, "alerts")
    section = mapping(raw, where, _KEYS)
    base = AlertSettings()
    hooks: list[Webhook] = []
    for i, item in enumerate(sequence(section.get("webhooks") or [], where.child("webhooks"))):
        hook = _webhook(item, where.child("webhooks").child(i))
        if any(h.name == hook.name for h in hooks):
            raise where.child("webhooks").child(hook.name).error("two webhooks have this name")
        hooks.append(hook)
    return AlertSettings(
        webhooks=tuple(hooks),
        queue_size=whole(section["queue_size"], where.child("queue_size")) if "queue_size" in section
        else base.queue_size,
        timeout_s=positive(section["timeout_s"], where.child("timeout_s")) if "timeout_s" in section
        else base.timeout_s,
        attempts=whole(section["attempts"], where.child("attempts")) if "attempts" in section else base.attempts,
    )


def _webhook(item: object, at: Where) -> Webhook:
    section = mapping(item, at, _WEBHOOK_KEYS)
    if ("url" in section) == ("url_env" in section):
        raise at.error("give url or url_env (one of them)")
    if "url" in section:
        url = text(section["url"], at.child("url"))
        _check_url(url, f"{at.path}: {at.key}.url")
        source = UrlSource(url=WebhookUrl(url))
        default_name = source.url.host_only if source.url else "webhook"
    else:
        env = text(section["url_env"], at.child("url_env"))
        source = UrlSource(env=env)
        default_name = f"${env}"
    name = text(section["name"], at.child("name")) if "name" in section else default_name
    where = Where(at.path, f"alerts.webhooks.{name}") if "name" in section else at
    fmt = text(section.get("format", "json"), where.child("format")).lower()
    try:
        format_ = WebhookFormat(fmt)
    except ValueError:
        raise where.child("format").error(f"{fmt!r}: choose slack or json") from None
    kinds = _kinds(section["events"], where.child("events")) if "events" in section else frozenset(AlertKind)
    return Webhook(name, source, format_, kinds, f"{where.path}: {where.key}")


def _kinds(raw: object, where: Where) -> frozenset[AlertKind]:
    kinds: set[AlertKind] = set()
    for i, value in enumerate(sequence(raw, where)):
        name = text(value, where.child(i))
        try:
            kinds.add(AlertKind(name))
        except ValueError:
            raise where.child(i).error(f"{name!r}: not an alert (choose from "
                                       f"{', '.join(k.value for k in AlertKind)})") from None
    if not kinds:
        raise where.error("an empty list sends nothing; leave events out for every kind")
    return frozenset(kinds)


def _check_url(url: str, where: str) -> None:
    """http(s) with a host; the message never repeats the URL (it may hold a token)."""
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"{where}: not an http(s) URL with a host (the value is not shown: it may hold a token)")
