"""Errors of the SSH transport. They are not provider errors: the SSH provider translates them.

Every error names the endpoint (``user@host:port``) so a message in a log says which machine failed.
"""

from __future__ import annotations


class TransportError(Exception):
    """Reaching or using a machine failed. Base of every transport error."""

    def __init__(self, message: str, *, endpoint: str = "") -> None:
        self.message = message
        self.endpoint = endpoint
        super().__init__(f"{endpoint}: {message}" if endpoint else message)


class TransportUnreachableError(TransportError):
    """No SSH session could be set up before the deadline (refused, timed out, reset)."""


class TransportAuthError(TransportError):
    """The server refused our client key (or we have none it accepts)."""


class ExecTimeoutError(TransportError):
    """A command did not finish within its timeout; the channel (or local process group) was closed."""


class RemotePathError(TransportError):
    """A remote file could not be read or written (missing, permission denied)."""


class HostKeyError(TransportError):
    """Base of host key refusals. ``seen`` is the fingerprint the server presented."""

    def __init__(self, message: str, *, endpoint: str = "", seen: str = "") -> None:
        self.seen = seen
        super().__init__(message, endpoint=endpoint)


class UnknownHostKeyError(HostKeyError):
    """The server's key is not pinned anywhere and first-contact trust was not allowed."""


class HostKeyMismatchError(HostKeyError):
    """The server presented a key different from the pinned one: possibly a man in the middle."""

    def __init__(self, message: str, *, endpoint: str = "", seen: str = "", expected: tuple[str, ...] = ()) -> None:
        self.expected = expected
        super().__init__(message, endpoint=endpoint, seen=seen)
