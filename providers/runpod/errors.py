"""The one place RunPod's failures (HTTP statuses, GraphQL ``errors`` at HTTP 200) become orch's ProviderError
taxonomy, and the provider's name and credentials hint the other modules share."""

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

PROVIDER = "runpod"
AUTH_HINT = "set RUNPOD_API_KEY or run `runpod config` (https://www.runpod.io/console/user/settings)"

# The no-capacity answers of podFindAndDeployOnDemand: a message and no error code. RunPod's current wording
# ("There are no longer any instances available with the requested specifications. Please refresh and try
# again.") and the older one ("There are no instances available with the request specifications...") are both
# still seen, so both are recognised.
NO_CAPACITY_PREFIXES = ("there are no longer any instances available", "there are no instances available")


def translate_error(response: httpx.Response) -> ProviderError | None:
    """The one place RunPod failures become the taxonomy.

    GraphQL errors arrive with HTTP 200 as ``{"errors": [{"message", "extensions": {"code"}}]}``. The
    no-capacity refusal has only a message ("There are no longer any instances available with the requested
    specifications...", formerly "There are no instances available with the request specifications..."),
    no code, so it is recognised by that documented message here and only here;
    likewise "pod not found ..." and balance refusals, for which RunPod publishes no codes either.
    """
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    errors = body.get("errors") if isinstance(body, dict) else None
    first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
    message = str(first.get("message") or response.text[:200] or f"HTTP {status}")
    code = str((first.get("extensions") or {}).get("code") or "") or None
    kw: dict[str, Any] = {"provider": PROVIDER, "code": code}
    lowered = message.lower()
    if status in (401, 403) or code in ("UNAUTHENTICATED", "FORBIDDEN"):
        return AuthError(message, **kw, hint=AUTH_HINT)
    if status == 429:
        return RateLimitedError(message, **kw)
    if status >= 500:
        return ProviderUnavailableError(message, **kw)
    if status >= 400:
        return InvalidRequestError(message, **kw)
    if not first:
        return None
    if lowered.startswith(NO_CAPACITY_PREFIXES):
        return InsufficientCapacityError(message, **kw)
    if any(word in lowered for word in ("balance", "enough funds", "quota", "spend limit")):
        return QuotaExceededError(message, **kw, hint="add funds or raise the spend limit in the RunPod console")
    if "pod not found" in lowered:
        return InstanceNotFoundError(message, **kw)
    if code in ("GRAPHQL_VALIDATION_FAILED", "GRAPHQL_PARSE_FAILED", "BAD_USER_INPUT", "BAD_REQUEST"):
        return InvalidRequestError(message, **kw)
    if code == "INTERNAL_SERVER_ERROR":
        return ProviderUnavailableError(message, **kw)
    return InvalidRequestError(message, **kw)
