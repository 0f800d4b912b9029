"""The one place GCE errors (HTTP errors, failed operations, auth, transport) become orch's ProviderError
taxonomy. Imports google.* and requests: only this package's modules import it."""

from __future__ import annotations

import google.auth.exceptions
import requests.exceptions
from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    ProviderError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
    ResourceInUseError,
)

_AUTH_HINT = "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"

# Structured codes: operation errors carry errors[].code, HTTP errors errors[].reason (and ErrorInfo.reason).
_CAPACITY = {"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "RESOURCE_POOL_EXHAUSTED",
             "resourcePoolExhausted", "STOCKOUT"}
_QUOTA = {"QUOTA_EXCEEDED", "quotaExceeded", "QUOTA_LIMIT_EXCEEDED"}
# HTTP errors: errors[].reason rateLimitExceeded/userRateLimitExceeded (ErrorInfo RATE_LIMIT_EXCEEDED, status
# RESOURCE_EXHAUSTED / 429 or 403). Operations: RESOURCE_OPERATION_RATE_EXCEEDED ("Operation rate exceeded for
# resource ...": too many operations on one resource/image in a short time) is a throttle, not a bad request.
_RATE = {"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED", "RESOURCE_OPERATION_RATE_EXCEEDED",
         "RESOURCE_EXHAUSTED"}
_AUTH = {"authError", "forbidden", "accessNotConfigured", "PERMISSIONS_ERROR", "insufficientPermissions",
         "ACCESS_TOKEN_SCOPE_INSUFFICIENT", "SERVICE_DISABLED"}
_NOT_FOUND = {"notFound", "RESOURCE_NOT_FOUND"}
#: GCE refusing to delete what another resource still uses (a placement policy an instance names).
_IN_USE = {"resourceInUseByAnotherResource", "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"}


class OperationError(Exception):
    """A zone operation that finished with ``error``; carries the structured fields for translate_error."""

    def __init__(self, op: compute_v1.Operation) -> None:
        self.operation_type = op.operation_type
        self.http_status = int(op.http_error_status_code or 0)
        self.codes = tuple(e.code for e in op.error.errors)
        self.messages = tuple(e.message for e in op.error.errors)
        super().__init__("; ".join(self.messages) or op.http_error_message or "operation failed")


def _error_codes(exc: gexc.GoogleAPICallError) -> set[str]:
    codes = {str(e.get("reason", "")) for e in exc.errors if isinstance(e, dict)}
    if exc.reason:
        codes.add(exc.reason)
    return codes - {""}


def translate_error(exc: BaseException) -> ProviderError:
    """The one place GCE errors (HTTP errors, failed operations, auth, transport) become orch's taxonomy."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, google.auth.exceptions.DefaultCredentialsError | google.auth.exceptions.RefreshError):
        return AuthError(str(exc), provider="gcp", hint=_AUTH_HINT)
    if isinstance(exc, OperationError):
        codes, status, message = set(exc.codes), exc.http_status, str(exc)
        code = exc.codes[0] if exc.codes else None
    elif isinstance(exc, gexc.GoogleAPICallError):
        codes, status, message = _error_codes(exc), int(exc.code or 0), exc.message
        code = sorted(codes)[0] if codes else None
    elif isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout | gexc.RetryError):
        return ProviderUnavailableError(str(exc), provider="gcp")
    else:
        raise exc
    if codes & _CAPACITY or (isinstance(exc, OperationError) and exc.operation_type == "insert" and status == 503):
        return InsufficientCapacityError(message, provider="gcp", code=code or "ZONE_RESOURCE_POOL_EXHAUSTED")
    if codes & _QUOTA:
        return QuotaExceededError(message, provider="gcp", code=code,
                                  hint="request more quota at https://console.cloud.google.com/iam-admin/quotas")
    if codes & _RATE or status == 429:
        return RateLimitedError(message, provider="gcp", code=code)
    if codes & _AUTH or status in (401, 403):
        return AuthError(message, provider="gcp", code=code,
                         hint=f"check the IAM roles of these credentials (Compute Instance Admin); {_AUTH_HINT}")
    if codes & _IN_USE:
        return ResourceInUseError(message, provider="gcp", code=code)
    if codes & _NOT_FOUND or status == 404:
        return InstanceNotFoundError(message, provider="gcp", code=code)
    if status >= 500:
        return ProviderUnavailableError(message, provider="gcp", code=code)
    return InvalidRequestError(message, provider="gcp", code=code)

