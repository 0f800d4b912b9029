"""Waiting for a GCE operation (zone, region or global): poll until it is DONE, bounded by the configured
operation timeout, and raise its error translated. Only this package's modules import it."""

from __future__ import annotations

from collections.abc import Callable

from google.cloud import compute_v1

from providers.errors import ProviderUnavailableError

from .errors import OperationError, translate_error


def wait_done(op: compute_v1.Operation, poll: Callable[[str], compute_v1.Operation], *,
              clock: Callable[[], float], timeout_s: float) -> compute_v1.Operation:
    """``poll(name)`` (the operations client's ``wait``) until ``op`` is DONE or ``timeout_s`` has passed on
    ``clock``; a DONE operation with errors raises them translated."""
    deadline = clock() + timeout_s
    while op.status != compute_v1.Operation.Status.DONE:
        if clock() > deadline:
            raise ProviderUnavailableError(f"operation {op.name} still {op.status.name} after "
                                           f"{timeout_s:.0f}s", provider="gcp")
        op = poll(op.name)
    if op.error.errors:
        raise translate_error(OperationError(op))
    return op
