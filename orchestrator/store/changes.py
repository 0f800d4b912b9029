"""The server's count of the transactions that wrote jobs and attempts (PostgreSQL; migration 0012).

A daemon asks, each tick, whether anybody wrote rows it keeps a read of: its held jobs (``change_token``), the
jobs needing a driver (``take_share``), every daemon's live attempts (the sweep's ``live_attempts_token``).
Each answer is a digest of 10k rows at 10k jobs; a fleet of K daemons made the server digest the same rows K
times a tick. ``Counted`` keeps such answers under the ``store_changes`` row as read before them: while the row
reads the same, no transaction that wrote those tables has committed since (the triggers bump it as each one
commits, in the same commit as its rows), so the kept answer still holds and a steady tick reads one row.

Read before the answer it guards, in the same transaction or an earlier one: a commit between the two makes the
next read of the row differ (the answer is then computed again), never the reverse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlmodel import Session

T = TypeVar("T")

#: Which counts an answer depends on.
JOBS, ATTEMPTS, BOTH = ("jobs",), ("attempts",), ("jobs", "attempts")


def counts(tx: Session) -> tuple[int, int] | None:
    """The (jobs, attempts) counts; None where the server keeps none (SQLite, or no row)."""
    conn = tx.connection()
    if conn.dialect.name != "postgresql":
        return None
    found = conn.exec_driver_sql("SELECT jobs, attempts FROM store_changes WHERE id = 1").first()
    return None if found is None else (int(found[0]), int(found[1]))


@dataclass
class Counted:
    """Answers kept by name, each under the counts it depends on as read before it was computed."""

    kept: dict[str, tuple[tuple[int, ...], Any]] = field(default_factory=dict)
    #: How many answers were computed (not taken as kept): tests read it.
    computed: int = 0

    def get(self, tx: Session, name: str, depends: Sequence[str], compute: Callable[[], T]) -> T:
        """``compute()``'s answer, or the one kept under ``name`` while the counts in ``depends`` read the same."""
        now = counts(tx)
        if now is None:
            self.computed += 1
            return compute()
        key = tuple(now[0 if d == "jobs" else 1] for d in depends)
        hit = self.kept.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]  # type: ignore[no-any-return]
        value = compute()
        self.computed += 1
        self.kept[name] = (key, value)
        return value

    def forget(self) -> None:
        self.kept.clear()
