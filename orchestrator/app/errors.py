"""The two errors every ``orch`` operation here raises: what failed (exit 1), what cannot be used (exit 2)."""

from __future__ import annotations


class JobsError(RuntimeError):
    """An operation failed (exit 1); the message says what and, where it can, what to do."""


class BadInputError(ValueError):
    """The user's input cannot be used (exit 2)."""
