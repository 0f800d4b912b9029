"""One error taxonomy for every provider.

Each adapter translates its SDK's or HTTP API's errors into these in ONE function (``translate_error``
in the adapter module). No other code matches on error strings.
"""

from __future__ import annotations


class ProviderError(Exception):
    """Base of every error an adapter raises. ``retryable`` says whether trying again in place may work."""

    retryable: bool = False

    def __init__(self, message: str, *, provider: str = "", code: str | None = None, hint: str | None = None):
        self.message = message
        self.provider = provider
        self.code = code
        self.hint = hint
        super().__init__(message)

    def __str__(self) -> str:
        prefix = f"{self.provider}: " if self.provider else ""
        code = f" [{self.code}]" if self.code else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{prefix}{self.message}{code}{hint}"


class AuthError(ProviderError):
    """Credentials missing, invalid or not allowed to do this. ``hint`` says how to fix it."""


class QuotaExceededError(ProviderError):
    """The account's quota (vCPU, GPU) forbids this launch. Not retried in place: try another offer."""


class InsufficientCapacityError(ProviderError):
    """The cloud has no capacity for this offer now. Not retried in place: try another offer."""


class GpuCheckFailedError(InsufficientCapacityError):
    """The machine answers but its own GPU check (an SSH host's ``verify_command``) failed: it cannot serve GPUs
    now (a driver problem), so the planner moves on as for capacity; the engine names the cause ``driver``."""


class RateLimitedError(ProviderError):
    """Throttled. Retried with backoff inside the adapter; raised when the deadline passes."""

    retryable = True


class ProviderUnavailableError(ProviderError):
    """A transient server-side failure (5xx, timeout, connection reset). Retried with backoff."""

    retryable = True


class InvalidRequestError(ProviderError):
    """The request is wrong (bad instance type, bad parameter): a bug or a bad manifest, never retried."""


class MissingWorkdirError(InvalidRequestError):
    """The machine lacks the working directory orch's config names for it (an SSH host's ``workdir``): a
    configuration error, not capacity; the engine names the cause ``workdir``."""


class DiskBelowImageError(InvalidRequestError):
    """The boot disk asked for is smaller than the machine image's own disk, which the cloud refuses. A job's disk is
    the least it needs, so the adapter rents the image's size instead (Azure: the same create without an explicit
    size; AWS and GCP read the image's size first and never send a smaller one)."""


class ResourceNotFoundError(ProviderError):
    """A resource (an instance, a security group, a firewall rule, a public IP...) does not exist.

    Deleting one that is missing succeeds: callers swallow it there."""


class InstanceNotFoundError(ResourceNotFoundError):
    """The instance does not exist. ``terminate`` swallows it; ``get`` returns None instead."""


class ResourceInUseError(ProviderError):
    """A resource cannot be deleted yet: something (an instance, a NIC) still uses it. Try again later."""


class PriceTooLowError(ProviderError):
    """Outbid: the spot/bid price is below the market's. Not retried at that price."""


#: Errors after which the planner should move to the next offer rather than fail the job.
MOVE_ON_ERRORS: tuple[type[ProviderError], ...] = (
    InsufficientCapacityError,
    QuotaExceededError,
    PriceTooLowError,
)
