"""The one place Vast.ai's failures (an HTTP status and/or a ``{"success": false}`` envelope) become orch's
ProviderError taxonomy, and the provider's name and credentials hint the other modules share."""

from __future__ import annotations

from typing import Any

import httpx

from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    PriceTooLowError,
    ProviderError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)

PROVIDER = "vastai"
AUTH_HINT = "set VAST_API_KEY, or run `vastai set api-key <key>` (key at https://cloud.vast.ai/manage-keys/)"

# Error identifiers Vast puts in {"success": false, "error": ..., "msg": ...} (vast-ai/docs openapi.yaml).
_NOT_FOUND_CODES = frozenset({"no_such_instance", "not_found"})
_NO_ASK_CODES = frozenset({"no_such_ask"})
_CREDIT_CODES = frozenset({"insufficient_credit", "insufficient_balance", "low_credit"})
_AUTH_CODES = frozenset({"auth_error", "unauthorized"})
_RATE_CODES = frozenset({"rate_limit_exceeded"})


def translate_error(response: httpx.Response) -> ProviderError | None:
    """THE one place Vast's failures become the taxonomy. None when the response is a success.

    Vast reports failure by HTTP status and/or an envelope ``{"success": false, "error", "msg"}`` (even at
    HTTP 200, e.g. a rejected bid). The error identifier wins over the status: Vast answers an
    unauthorized search with 404 and out-of-credit with 4xx codes that also mean other things.
    """
    status = response.status_code
    try:
        body: Any = response.json() if response.content else None
    except ValueError:
        body = None
    envelope = body if isinstance(body, dict) else {}
    failed_envelope = envelope.get("success") is False
    if status < 400 and not failed_envelope:
        return None
    code = str(envelope.get("error") or "") or None
    msg = str(envelope.get("msg") or envelope.get("detail") or envelope.get("message") or response.text[:200])
    words = f"{code or ''} {msg}".lower()
    where = f"HTTP {status}"

    if status == 429 or code in _RATE_CODES:
        return RateLimitedError(f"rate limited ({where}): {msg}", provider=PROVIDER, code=code or "429")
    if status >= 500:
        return ProviderUnavailableError(f"server error {where}: {msg}", provider=PROVIDER, code=code)
    if code in _AUTH_CODES or status == 401 or "invalid user key" in words:
        return AuthError(f"API key refused ({where}): {msg}", provider=PROVIDER, code=code, hint=AUTH_HINT)
    if code in _NOT_FOUND_CODES:
        return InstanceNotFoundError(f"no such instance: {msg}", provider=PROVIDER, code=code)
    # The spec shows no_such_ask both as the identifier and inside msg under error "invalid_args".
    if code in _NO_ASK_CODES or "no_such_ask" in words or status == 410:
        return InsufficientCapacityError(f"offer no longer available: {msg}", provider=PROVIDER,
                                         code="no_such_ask")
    if code in _CREDIT_CODES or status in (402, 411) or "credit" in words:
        return QuotaExceededError(f"not enough credit: {msg}", provider=PROVIDER, code=code,
                                  hint="add credit at https://cloud.vast.ai/billing/")
    if code == "invalid_price" or ("bid" in words and ("low" in words or "below" in words)):
        return PriceTooLowError(f"bid refused: {msg}", provider=PROVIDER, code=code or "invalid_price")
    if status == 403:
        return AuthError(f"not allowed ({where}): {msg}", provider=PROVIDER, code=code, hint=AUTH_HINT)
    if status == 404:
        return InstanceNotFoundError(f"not found ({where}): {msg}", provider=PROVIDER, code=code)
    return InvalidRequestError(f"request refused ({where}): {msg}", provider=PROVIDER, code=code)

