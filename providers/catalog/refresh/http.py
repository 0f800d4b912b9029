"""The HTTP calls of a refresh's sources: one place turns transport errors, bad statuses and non-JSON into
``SourceError`` (naming the URL, never the credentials)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from providers.catalog.refresh.model import SourceError

if TYPE_CHECKING:
    import httpx


def call_json(client: httpx.Client, method: str, url: str, **kwargs: Any) -> Any:
    import httpx

    shown = url.split("?", 1)[0]
    try:
        response = client.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        raise SourceError(f"{method} {shown}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise SourceError(f"{method} {shown}: HTTP {response.status_code}")
    try:
        return response.json()
    except ValueError:
        raise SourceError(f"{method} {shown}: the answer is not JSON") from None
