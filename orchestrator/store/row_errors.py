"""What the store's row operations raise (orchestrator/store/repo.py and the modules it gathers)."""

from __future__ import annotations

__all__ = ["InvalidTransitionError", "NotFoundError"]


class NotFoundError(LookupError):
    """The named row (a job, an attempt, an instance) is not in the store."""


class InvalidTransitionError(ValueError):
    """An attempt was asked to move to a state its current state cannot reach (engine/states.py)."""
