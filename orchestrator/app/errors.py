"""The two errors every ``orch`` operation here raises: what failed (exit 1), what cannot be used (exit 2)."""

from __future__ import annotations

from collections.abc import Sequence


class JobsError(RuntimeError):
    """An operation failed (exit 1); the message says what and, where it can, what to do."""


class BadInputError(ValueError):
    """The user's input cannot be used (exit 2)."""


def no_job_named(names: Sequence[str]) -> str:
    """What every command says of job names the store does not hold, and where the names are."""
    return f"no job named {', '.join(repr(n) for n in names)} (orch status lists the jobs)"
