"""One daemon's standing in a PostgreSQL fleet, kept between ticks: its epoch, the jobs it holds, the fence.

The fleet's rules and its single-statement steps (registration, reap, share, fence) are store/fleet.py's; this
is the daemon's side of them, run at each tick's start (``begin``) and in each fenced transaction (``job``,
``daemon``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from orchestrator.store.changes import Counted
from orchestrator.store.db import Store
from orchestrator.store.fleet import (
    Holding,
    LeaseLostError,
    fence_daemon,
    fence_job,
    heartbeat,
    reap,
    take_share,
)

#: How long a tick's reap waits for rows a lapsed daemon may hold locked (it stopped inside a write) before the
#: claim goes on without it, skipping rows in use (``FleetMember.begin``).
REAP_WAIT_MS = 5000


@dataclass
class FleetMember:
    """One daemon's standing in the fleet, kept between ticks: its epoch and the jobs it holds.

    ``begin`` runs at the start of each tick (``take_share``); ``job``/``daemon`` fence a transaction.
    ``clock`` is read afresh by each fence, so a daemon that was paused sees the time it resumed at.
    """

    owner: str
    ttl: timedelta
    clock: Callable[[], datetime]
    epoch: int | None = None
    holding: Holding | None = None
    #: Ticks begun (what a tick's cloud listing is keyed by).
    ticks: int = 0
    #: Called with ``now`` as each tick begins, before the claim (the fleet's lister takes its listing first:
    #: orchestrator/daemon/fencing.py).
    on_begin: list[Callable[[datetime], None]] = field(default_factory=list)
    #: The claim's fleet-wide answers, kept while nobody writes jobs or attempts (``take_share``'s ``counted``).
    counted: Counted = field(default_factory=Counted)

    def join(self, tx: Session, now: datetime) -> None:
        """Register without claiming (a daemon starting): daemons started together then share evenly."""
        self.epoch, _ = heartbeat(tx, self.owner, self.epoch, ttl=self.ttl, now=now)

    def begin(self, store: Store, now: datetime, *, attempts_unchanged: bool = False) -> Holding:
        """Reap the lapsed (waiting for rows others reap: every claimer then sees them gone), then renew and
        take the share. ``attempts_unchanged``: the caller wrote no attempt since the last claim (the held rows
        it read then may serve again: ``take_share``'s ``known``).

        The reap (a transaction of its own, and the claim's reap skipping rows in use) runs only when some
        other registration the last claim read has lapsed by ``now`` (or there was no claim yet): a steady
        fleet's expiries are all ahead, and each daemon paid that transaction and a locking read every tick
        for nothing. A registration lapsing unseen (one joining after that read would need a clock behind by
        the TTL) is read by this claim (not counted live, its jobs not free yet): the next tick reaps it.
        Where the waiting reap timed out, the claim reaps what it can, skipping rows in use."""
        self.ticks += 1
        for hook in self.on_begin:
            hook(now)
        lapse = self.holding.next_lapse if self.holding is not None else now
        reaped = lapse is None or lapse > now
        if not reaped:
            try:
                with store.transaction() as tx:
                    if store.dialect == "postgresql":     # a lapsed daemon stopped inside a write: do not stall
                        tx.connection().exec_driver_sql(f"SET LOCAL lock_timeout = '{REAP_WAIT_MS}ms'")
                    reap(tx, now, keep=self.owner, wait=True)
                reaped = True
            except OperationalError:
                pass                                    # reaped next tick (or by take_share, skipping it)
        self.counted.last = None    # the counts this claim reads (``SqlEngineStore`` checks its reads against them)
        with store.transaction() as tx:
            known = self.holding.rows if self.holding is not None and attempts_unchanged else None
            self.holding = take_share(tx, self.owner, self.epoch, ttl=self.ttl, now=now, known=known,
                                      counted=self.counted, reaped=reaped)
        self.epoch = self.holding.epoch
        return self.holding

    def holds(self, job_id: int) -> bool:
        return self.holding is not None and job_id in self.holding.jobs

    def job(self, tx: Session, job_id: int) -> None:
        if self.holding is None or self.epoch is None:
            raise LeaseLostError(f"daemon {self.owner} holds no leases yet")
        fence_job(tx, self.owner, self.epoch, job_id, self.holding.jobs.get(job_id), self.clock())

    def daemon(self, tx: Session) -> None:
        if self.epoch is None:
            raise LeaseLostError(f"daemon {self.owner} has not joined yet")
        fence_daemon(tx, self.owner, self.epoch, self.clock())
