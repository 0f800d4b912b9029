"""What of a webhook URL may be shown: its scheme and host, never its path, query or user info.

Webhook URLs carry their secret in themselves (Slack's ``/services/T…/B…/token`` path, ``?token=``,
``user:pass@``), so logs, events and errors name a webhook by ``WebhookUrl.host_only`` alone.
"""

from __future__ import annotations

from urllib.parse import urlsplit


class WebhookUrl:
    """A webhook URL that never prints itself: ``str()``/``repr()`` give the scheme and host only."""

    __slots__ = ("_url", "host_only")

    def __init__(self, url: str) -> None:
        self._url = url
        self.host_only = host_only(url)

    def reveal(self) -> str:
        """The full URL, for the HTTP request only."""
        return self._url

    def __str__(self) -> str:
        return self.host_only

    def __repr__(self) -> str:
        return f"WebhookUrl({self.host_only})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WebhookUrl) and other._url == self._url

    def __hash__(self) -> int:
        return hash(self._url)


def host_only(url: str) -> str:
    """``https://hooks.slack.com`` for ``https://hooks.slack.com/services/T0/B0/secret?x=1``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return "<unparsable webhook URL>"
    if not host:
        return "<webhook URL without a host>"
    shown = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown}" + (f":{port}" if port else "")
