"""How the adapter authenticates and configures its ARM clients.

``DefaultAzureCredential`` (az login, AZURE_CLIENT_ID/..., managed identity) unless ``settings.static_token``
is set, which exists for tests against a local fake ARM over http:// only. Imports azure.core: only the
adapter imports this module (azure.identity is imported when a default credential is first needed).
"""

from __future__ import annotations

from typing import Any

from azure.core.credentials import AccessToken
from azure.core.pipeline import PipelineRequest
from azure.core.pipeline.policies import SansIOHTTPPolicy

from .settings import Settings


class StaticTokenCredential:
    """A fixed bearer token (tests against a local fake only). Never used unless settings.static_token."""

    def __init__(self, token: str) -> None:
        self._token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self._token, 2**31 - 1)


class StaticBearerPolicy(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """Sets ``Authorization: Bearer <token>`` without the https check of the SDK's bearer policy."""

    def __init__(self, token: str) -> None:
        self._header = f"Bearer {token}"

    def on_request(self, request: PipelineRequest) -> None:  # type: ignore[type-arg]
        request.http_request.headers["Authorization"] = self._header


def credential(settings: Settings) -> Any:
    """The credential the ARM clients authenticate with: a static token for a local fake, else the default chain."""
    if settings.static_token:
        return StaticTokenCredential(settings.static_token)
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential()


def client_kwargs(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for every ARM client: the SDK's own retries off (providers.retry is the one retry
    policy), orch's timeouts and polling interval, and the fake's base URL and bearer policy when set."""
    kw: dict[str, Any] = {
        "retry_total": 0,
        "polling_interval": settings.polling_interval_s,
        "connection_timeout": settings.connect_timeout_s,
        "read_timeout": settings.read_timeout_s,
    }
    if settings.base_url:
        kw["base_url"] = settings.base_url
    if settings.static_token:
        kw["authentication_policy"] = StaticBearerPolicy(settings.static_token)
    return kw
