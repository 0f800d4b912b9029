"""The one place Lambda Cloud's failures (the spec's ApiError* codes, else the HTTP status) become orch's
ProviderError taxonomy, and the provider's name and credentials hint the other modules share."""

from __future__ import annotations

from typing import Any

import httpx

from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    ProviderError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)

PROVIDER = "lambda"
AUTH_HINT = "set LAMBDA_API_KEY or api_key in ~/.lambda_cloud/lambda_keys (https://cloud.lambda.ai/api-keys)"


def translate_error(response: httpx.Response) -> ProviderError | None:
    """The one place Lambda failures become the taxonomy. Codes are the spec's ApiError* constants."""
    if response.status_code < 400:
        return None
    code, message, suggestion = "", response.text[:200], None
    try:
        err = response.json().get("error") or {}
        code = str(err.get("code") or "")
        message = str(err.get("message") or message)
        suggestion = err.get("suggestion")
    except (ValueError, AttributeError):
        pass
    status = response.status_code
    kw: dict[str, Any] = {"provider": PROVIDER, "code": code or f"HTTP {status}"}
    if code == "instance-operations/launch/insufficient-capacity":
        return InsufficientCapacityError(message, **kw, hint=suggestion)
    if code == "global/quota-exceeded":
        return QuotaExceededError(message, **kw, hint=suggestion)
    if code in ("global/invalid-api-key", "global/account-inactive", "global/invalid-address") or status in (401, 403):
        return AuthError(message, **kw, hint=suggestion or AUTH_HINT)
    if status == 429:
        return RateLimitedError(message, **kw)
    if status >= 500 or code.startswith("provider/") or code == "global/internal-error":
        # "provider/..." codes are Lambda's upstream outages (spec info): transient by its own account.
        return ProviderUnavailableError(message, **kw)
    if code == "global/object-does-not-exist" or status == 404:
        return InstanceNotFoundError(message, **kw)
    return InvalidRequestError(message, **kw, hint=suggestion)
