"""The one place Azure SDK errors become orch's ProviderError taxonomy (ARM's error code first, then status).

Imports azure.core: only this package's modules import it.
"""

from __future__ import annotations

from typing import Any

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from providers.errors import (
    AuthError,
    DiskBelowImageError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    PriceTooLowError,
    ProviderError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
    ResourceInUseError,
)

NAME = "azure"
AUTH_HINT = "run `az login` or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET"

_CAPACITY_CODES = frozenset({
    "skunotavailable", "allocationfailed", "zonalallocationfailed", "overconstrainedallocationrequest",
    "overconstrainedzonalallocationrequest",
})
# OperationNotAllowed is ARM's code for quota refusals ("... results in exceeding approved ... Cores quota") but also
# for others, e.g. an OS disk smaller than its image's (target osDisk.diskSizeGB): only the quota ones are quota.
_QUOTA_CODES = frozenset({"quotaexceeded"})
_NOT_ALLOWED = "operationnotallowed"
_DISK_BELOW_IMAGE_TARGET = "osdisk.disksizegb"
# Azure's Spot refusal when billingProfile.maxPrice is below the size's current Spot price ("Unable to perform
# operation ... since the provided maximum price ... USD is lower than the current spot price ...": learn.microsoft
# .com/azure/virtual-machines/error-codes-spot). A higher max price (or -1) may succeed: move on, do not retry.
_PRICE_CODES = frozenset({"spotpricegreaterthanprovidedmaxprice"})
_THROTTLE_CODES = frozenset({"toomanyrequests", "throttled"})
_AUTH_CODES = frozenset({
    "authorizationfailed", "invalidauthenticationtoken", "authenticationfailed", "expiredauthenticationtoken",
    "invalidauthenticationtokentenant", "linkedauthorizationfailed",
})
_NOT_FOUND_CODES = frozenset({"resourcenotfound", "notfound", "resourcegroupnotfound"})
_IN_USE_CODES = frozenset({"inusenetworksecuritygroupcannotbedeleted", "publicipaddresscannotbedeleted", "nicinuse",
                           "inusesubnetcannotbedeleted"})


def translate_error(exc: BaseException) -> ProviderError:
    """The one place Azure SDK errors become orch's taxonomy (codes from ARM's error body, then status)."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, HttpResponseError):
        code = (exc.error.code if exc.error is not None and exc.error.code else "") or ""
        status = exc.status_code or (exc.response.status_code if exc.response is not None else None)
        message = (exc.error.message if exc.error is not None and exc.error.message else None) or exc.message
        key = code.lower()
        kw: dict[str, Any] = {"provider": NAME, "code": code or (str(status) if status else None)}
        if key in _CAPACITY_CODES:
            return InsufficientCapacityError(message, **kw)
        if key in _PRICE_CODES:
            return PriceTooLowError(message, **kw)
        target = str(getattr(exc.error, "target", None) or "").lower()
        if key == _NOT_ALLOWED and target == _DISK_BELOW_IMAGE_TARGET:
            return DiskBelowImageError(message, **kw)
        if key in _QUOTA_CODES or (key == _NOT_ALLOWED and "quota" in message.lower()):
            return QuotaExceededError(message, **kw)
        if key in _THROTTLE_CODES or status == 429:
            return RateLimitedError(message, **kw)
        if key in _AUTH_CODES or status in (401, 403) or isinstance(exc, ClientAuthenticationError):
            return AuthError(message, hint=AUTH_HINT, **kw)
        if key in _NOT_FOUND_CODES or status == 404:
            return InstanceNotFoundError(message, **kw)
        if key in _IN_USE_CODES:
            return ResourceInUseError(message, **kw)
        if status is not None and status >= 500:
            return ProviderUnavailableError(message, **kw)
        if key == "invalidparameter" or status == 400:
            return InvalidRequestError(message, **kw)
        if status is None:  # an LRO that failed with a code we do not know: a failed operation, not a bug
            return ProviderUnavailableError(message, **kw)
        return InvalidRequestError(message, **kw)
    if isinstance(exc, ClientAuthenticationError):
        return AuthError(str(exc), provider=NAME, hint=AUTH_HINT)
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return ProviderUnavailableError(str(exc), provider=NAME, code=type(exc).__name__)
    if isinstance(exc, AzureError):
        return ProviderUnavailableError(str(exc), provider=NAME, code=type(exc).__name__)
    return ProviderUnavailableError(str(exc), provider=NAME, code=type(exc).__name__)
