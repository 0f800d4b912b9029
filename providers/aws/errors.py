"""The ONE place botocore errors become orch's ProviderError taxonomy. Imports botocore: only this package's
modules import it."""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ReadTimeoutError,
)

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
    ResourceInUseError,
    ResourceNotFoundError,
)

PROVIDER = "aws"
AUTH_HINT = "run `aws configure` or set AWS_PROFILE / AWS_ACCESS_KEY_ID"

#: EC2's error codes, each to the error it is. The groups share no code, so their order does not matter; a code
#: not here is read by its HTTP status.
_BY_CODE: dict[str, type[ProviderError]] = {
    "SpotMaxPriceTooLow": PriceTooLowError,
    **dict.fromkeys(("InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
                     "InsufficientReservedInstanceCapacity", "MaxSpotInstanceCountExceeded",
                     "SpotCapacityNotAvailable"), InsufficientCapacityError),
    **dict.fromkeys(("VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotFleetRequestCountExceeded",
                     "ResourceLimitExceeded"), QuotaExceededError),
    **dict.fromkeys(("RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
                     "RequestThrottled", "SlowDown"), RateLimitedError),
    **dict.fromkeys(("UnauthorizedOperation", "AuthFailure", "InvalidClientTokenId", "SignatureDoesNotMatch",
                     "ExpiredToken", "ExpiredTokenException", "AccessDenied", "AccessDeniedException",
                     "OptInRequired", "UnrecognizedClientException"), AuthError),
    **dict.fromkeys(("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"), InstanceNotFoundError),
    **dict.fromkeys(("InvalidGroup.NotFound", "InvalidGroupId.NotFound", "InvalidKeyPair.NotFound",
                     "InvalidPlacementGroup.Unknown"), ResourceNotFoundError),
    **dict.fromkeys(("DependencyViolation", "InvalidPlacementGroup.InUse"), ResourceInUseError),
    **dict.fromkeys(("InternalError", "InternalFailure", "Unavailable", "ServiceUnavailable", "ServerInternal",
                     "RequestTimeout", "RequestExpired"), ProviderUnavailableError),
}


def translate_error(exc: BaseException) -> ProviderError:
    """The ONE place botocore errors become orch's taxonomy. Codes first; HTTP status only as fallback.

    (EC2 sends InsufficientInstanceCapacity with HTTP 500, so the status alone would call it transient.)
    """
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return AuthError(f"no usable AWS credentials: {exc}", provider=PROVIDER, hint=AUTH_HINT)
    if isinstance(exc, NoRegionError):
        return InvalidRequestError(f"no AWS region: {exc}", provider=PROVIDER)
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
        return ProviderUnavailableError(f"cannot reach AWS: {exc}", provider=PROVIDER)
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        message = str(err.get("Message", "")) or str(exc)
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        kind = _BY_CODE.get(code)
        if code == "Unsupported" and "availability zone" in message.lower():
            # "Your requested instance type (p4d.24xlarge) is not supported in your requested Availability Zone
            # (us-east-1e). Please retry your request by not specifying an Availability Zone or choosing ..." (EC2's
            # words as users report them, e.g. hashicorp/terraform-provider-aws#6390): the type is not offered
            # in that zone, so the offer cannot be had there, as with no capacity; the next offer is tried.
            # Another Unsupported (a configuration EC2 does not support) stays an invalid request.
            kind = InsufficientCapacityError
        if kind is not None:
            return kind(message, provider=PROVIDER, code=code, hint=AUTH_HINT if kind is AuthError else None)
        if status >= 500:
            return ProviderUnavailableError(message, provider=PROVIDER, code=code or str(status))
        if status == 429:
            return RateLimitedError(message, provider=PROVIDER, code=code)
        if code.startswith(("InvalidParameter", "Invalid", "MissingParameter", "Unsupported")) or 400 <= status < 500:
            return InvalidRequestError(message, provider=PROVIDER, code=code)
        return ProviderUnavailableError(message, provider=PROVIDER, code=code or None)
    if isinstance(exc, BotoCoreError):
        return ProviderUnavailableError(f"AWS client error: {exc}", provider=PROVIDER)
    return ProviderUnavailableError(f"unexpected error talking to AWS: {exc!r}", provider=PROVIDER)

