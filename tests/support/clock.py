"""The fake clock the engine tests move by hand: ``clock()`` is ``clock.now``, which a test sets or advances
(``clock.now += TICK``). No wall clock anywhere: a test's time passes only when the test says so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["T0", "ManualClock"]

#: The engine tests' usual start: 2026-12-01 12:00 UTC.
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class ManualClock:
    """A clock a test moves; it starts at ``now`` (``T0`` unless given)."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        """Move on by ``timedelta(**kw)``."""
        self.now += timedelta(**kw)
