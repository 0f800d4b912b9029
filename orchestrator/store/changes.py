"""The server's count of the transactions that wrote jobs, attempts and job_requests (PostgreSQL; migrations
0012, 0013).

A daemon asks, each tick, whether anybody wrote rows it keeps a read of: its held jobs (``change_token``), the
jobs needing a driver (``take_share``), every daemon's live attempts (the sweep's ``live_attempts_token``), the
open relaunch requests (``relaunch_requests``: read with their jobs' names, so under the jobs' count too).
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
from typing import TYPE_CHECKING, Any, TypeVar

from sqlmodel import Session

if TYPE_CHECKING:
    from orchestrator.store.db import Store

T = TypeVar("T")

#: Which counts an answer depends on.
JOBS, ATTEMPTS, BOTH = ("jobs",), ("attempts",), ("jobs", "attempts")
REQUESTS = ("jobs", "requests")     # the open relaunch requests, each with its job's name
_AT = {"jobs": 0, "attempts": 1, "requests": 2}
Counts = tuple[int, int, int]


def counts(tx: Session) -> Counts | None:
    """The (jobs, attempts, requests) counts; None where the server keeps none (SQLite, or no row)."""
    conn = tx.connection()
    if conn.dialect.name != "postgresql":
        return None
    found = conn.exec_driver_sql("SELECT jobs, attempts, requests FROM store_changes WHERE id = 1").first()
    return None if found is None else (int(found[0]), int(found[1]), int(found[2]))


@dataclass
class Counted:
    """Answers kept by name, each under the counts it depends on as read before it was computed."""

    kept: dict[str, tuple[tuple[int, ...], Any]] = field(default_factory=dict)
    #: How many answers were computed (not taken as kept): tests read it.
    computed: int = 0
    #: The counts the last ``get`` read (None: none read, or the caller cleared it): another ``Counted`` may
    #: key an answer computed later by them (``kept``; a later transaction is "after", as the module says).
    last: Counts | None = None

    def get(self, tx: Session, name: str, depends: Sequence[str], compute: Callable[[], T],
            *, read: Counts | None = None) -> T:
        """``compute()``'s answer, or the one kept under ``name`` while the counts in ``depends`` read the same.
        ``read``: counts already read (in this transaction or an earlier one), not read again."""
        now = read if read is not None else counts(tx)
        self.last = now
        if now is None:
            self.computed += 1
            return compute()
        key = _key(now, depends)
        hit = self.kept.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]  # type: ignore[no-any-return]
        value = compute()
        self.computed += 1
        self.kept[name] = (key, value)
        return value

    def kept_at(self, name: str, depends: Sequence[str], read: Counts) -> tuple[bool, Any]:
        """(True, the answer kept under ``name``) if it was kept at the counts ``read``; else (False, None)."""
        hit = self.kept.get(name)
        if hit is not None and hit[0] == _key(read, depends):
            return True, hit[1]
        return False, None

    def answer(self, store: Store, name: str, depends: Sequence[str], compute: Callable[[Session], T], *,
               read: Counts | None) -> T:
        """The answer kept under ``name`` at the counts ``read`` (already read: this tick's claim's), in no
        transaction of its own; else ``get``'s, in one (``compute`` gets its session)."""
        if read is not None:
            found, value = self.kept_at(name, depends, read)
            if found:
                return value  # type: ignore[no-any-return]
        with store.transaction() as tx:
            return self.get(tx, name, depends, lambda: compute(tx), read=read)

    def forget(self) -> None:
        self.kept.clear()


def _key(read: Counts, depends: Sequence[str]) -> tuple[int, ...]:
    """The counts of ``read`` an answer depending on ``depends`` is kept under."""
    return tuple(read[_AT[d]] for d in depends)
