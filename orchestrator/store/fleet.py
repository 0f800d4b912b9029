"""Several daemons on one PostgreSQL store: who is alive, who drives which job, and the fence.

* **Registry.** Each daemon has a row in ``daemons`` (its lease owner id, an ``epoch``, ``expires_at``) and
  renews it once per tick. Its job leases hold while that row is live: renewing one row keeps thousands of
  leases, so a steady tick writes nothing per job.
* **Shares.** Each tick a daemon takes about its share, ``ceil(jobs needing a driver / live daemons)``:
  it gives back what it holds above the share and claims free jobs (no owner, or an owner whose
  registration lapsed) up to it, with ``SELECT ... FOR UPDATE SKIP LOCKED`` so claimers never wait on each
  other. A daemon joining or leaving changes the share; within a tick or two the jobs are spread again.
* **Generations.** Each claim bumps ``jobs.lease_generation``.
* **Takeover.** A registration past ``expires_at`` is reaped (deleted) at the start of the next daemon's
  tick, in a transaction of its own that waits for rows other reapers hold, so every daemon claiming after
  it sees the lapsed one gone; only then are its jobs free. A daemon that comes back after that joins
  again with a new epoch and claims like any other (its old leases are void).
* **The fence.** Every write a daemon makes on a job's behalf runs ``fence_job`` in the same transaction:
  the job is still this daemon's at the generation it claimed, and this daemon's registration (its epoch)
  is live at the caller's clock, read ``FOR SHARE`` so a reaper's DELETE waits for the write to commit
  (or the write sees the reaping and fails). Cloud-changing calls check the same just before they go out
  (orchestrator/daemon/fencing.py). A paused or partitioned daemon therefore acts on nothing after it resumes
  until its next tick has claimed the job again.

A job needs a driver while it is not finished or still has a live attempt (a machine to watch or end).
A finished job's machine the cloud still bills (a terminate it accepted and has not carried out) is charged by
whichever daemons see it in their sweep, held or not: ``lock_unheld`` makes their charges take turns.
SQLite keeps one daemon (``leases.daemon_lock``) and uses none of this.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, exists, func, or_, update
from sqlmodel import Session, col, select

from orchestrator.engine.states import FINAL_ATTEMPT_STATES, AttemptState, JobStatus
from orchestrator.store.changes import BOTH, Counted
from orchestrator.store.models import Attempt, DaemonRow, Job

_FINAL_JOB = [s.value for s in JobStatus if s.is_final]
_LIVE_ATTEMPT = [s.value for s in AttemptState if s not in FINAL_ATTEMPT_STATES]
_CHUNK = 1000


class LeaseLostError(RuntimeError):
    """This daemon no longer holds what it was about to act for (its registration lapsed, or the job was
    taken over). The tick stops; the next one claims afresh."""


def needs_driver() -> Any:
    """SQL condition: the job is unfinished, or one of its attempts is live."""
    live = exists().where(Attempt.job_id == Job.id, col(Attempt.state).in_(_LIVE_ATTEMPT))
    return or_(col(Job.status).not_in(_FINAL_JOB), live)


# -- registry ------------------------------------------------------------------------------------------

def heartbeat(tx: Session, owner: str, epoch: int | None, *, ttl: timedelta, now: datetime) -> tuple[int, bool]:
    """Renew ``owner``'s registration until ``now + ttl``. Returns its epoch and whether it CONTINUED (the
    row was still live under ``epoch``); False means it (re)joined with a new epoch: its old leases are void."""
    if epoch is not None:
        # The steady case in one statement (a fleet daemon's every tick: a locking read and the ORM's flush
        # were two round trips and ~1 ms of CPU): renewed only if still live under ``epoch``.
        renewed = tx.execute(update(DaemonRow).where(col(DaemonRow.owner) == owner, col(DaemonRow.epoch) == epoch,
                                                     col(DaemonRow.expires_at) > now)
                             .values(heartbeat_at=now, expires_at=now + ttl)
                             .execution_options(synchronize_session=False))
        if renewed.rowcount == 1:
            return epoch, True
    row = tx.exec(select(DaemonRow).where(DaemonRow.owner == owner).with_for_update()).first()
    fresh = secrets.randbits(62)
    if row is None:
        row = DaemonRow(owner=owner, epoch=fresh, started_at=now, heartbeat_at=now, expires_at=now + ttl)
    else:
        row.epoch, row.started_at, row.heartbeat_at, row.expires_at = fresh, now, now, now + ttl
    tx.add(row)
    tx.flush()
    return fresh, False


def reap(tx: Session, now: datetime, *, keep: str | None = None, wait: bool = False) -> int:
    """Delete lapsed registrations (their jobs become free), except ``keep``'s.

    ``wait``: lock them in order and wait for a fenced write of theirs in flight to commit first; call it so
    in a transaction that holds no registration of its own (``FleetMember.begin`` does), or two daemons
    reaping each other would deadlock. Otherwise a row another transaction holds is skipped.
    """
    lapsed = (select(DaemonRow.owner).where(col(DaemonRow.expires_at) <= now, DaemonRow.owner != (keep or ""))
              .order_by(col(DaemonRow.owner)))
    owners = list(tx.exec(lapsed.with_for_update() if wait else lapsed.with_for_update(skip_locked=True)))
    if not owners:
        return 0
    return int(tx.execute(delete(DaemonRow).where(col(DaemonRow.owner).in_(owners))).rowcount or 0)


def live_daemons(tx: Session, now: datetime) -> list[str]:
    return list(tx.exec(select(DaemonRow.owner).where(col(DaemonRow.expires_at) > now).order_by(col(DaemonRow.owner))))


def leave(tx: Session, owner: str) -> int:
    """``owner`` leaves the fleet: its jobs are released and its registration deleted. Returns the jobs released."""
    released = release(tx, owner)
    tx.execute(delete(DaemonRow).where(DaemonRow.owner == owner))
    return released


# -- shares --------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Holding:
    """What a daemon holds after its tick's claim: job id -> lease generation, and how the fleet stood."""

    owner: str
    epoch: int
    jobs: dict[int, int] = field(default_factory=dict)
    live_daemons: int = 1
    share: int = 0
    released: int = 0
    claimed: int = 0
    #: The held rows as read, under their digest (PostgreSQL): the next claim reads them only if it moved.
    rows: HeldRows | None = field(default=None, compare=False)
    #: When the first other registration read lapses (None: there was none); before then the next tick need
    #: not wait on a reap (``FleetMember.begin``).
    next_lapse: datetime | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class HeldRows:
    """An owner's job rows (id -> lease generation, and the ids needing a driver) under their digest: how
    many and an md5 of every ``id:xmin`` (any update of a row gives it a new ``xmin``)."""

    digest: tuple[int, str]
    mine: dict[int, int]
    driving: list[int]


def take_share(tx: Session, owner: str, epoch: int | None, *, ttl: timedelta, now: datetime,
               limit: int | None = None, known: HeldRows | None = None, counted: Counted | None = None,
               reaped: bool = False) -> Holding:
    """Renew ``owner``, reap the lapsed, give back what is above the share, claim free jobs up to it.

    ``limit`` caps the share (None: ``ceil(needing / live daemons)``). ``known``: the rows the last claim read,
    valid while their jobs' live attempts are unchanged (the caller knows: only the holder writes them); on
    PostgreSQL they are taken again, not read, while the rows' digest is the same (a steady tick's case).
    ``counted`` (the caller's, kept between ticks): on PostgreSQL, how many jobs need a driver and that digest
    are taken from the last tick while the server's counts of job and attempt writers read the same
    (orchestrator/store/changes.py): a steady tick then scans neither table. ``reaped``: the caller reaped the
    lapsed registrations since it last read them, or read none lapsing before ``now`` (``FleetMember.begin``):
    not reaped again here (a lapsed one read below is reaped at the next tick; its jobs wait for that).
    """
    epoch, continued = heartbeat(tx, owner, epoch, ttl=ttl, now=now)
    if not continued:
        release(tx, owner)          # leases from a lapsed registration are void: claimed again below
        known = counted = None      # (this transaction wrote jobs: the counts do not cover its own writes)
    if not reaped:
        reap(tx, now, keep=owner)
    # Every registration's expiry, in one read: how many are live, and when the first other one lapses.
    registered = [(str(o), _aware(e)) for o, e in tx.execute(select(DaemonRow.owner, DaemonRow.expires_at)).all()]
    live = max(1, sum(1 for _, expires in registered if expires > now))
    next_lapse = min((expires for o, expires in registered if o != owner), default=None)
    needing, digest = (_needing_and_digest(tx, owner) if counted is None else
                       counted.get(tx, f"needing, {owner}'s digest", BOTH, lambda: _needing_and_digest(tx, owner)))
    share = math.ceil(needing / live) if limit is None else limit
    rows = _held_rows(tx, owner, known, digest)
    mine, driving = dict(rows.mine), rows.driving
    released = 0
    if len(driving) > share:
        excess = driving[share:]
        released = release(tx, owner, excess)
        for job_id in excess:
            mine.pop(job_id, None)
    claimed = claim_free(tx, owner, share - min(len(driving), share)) if len(driving) < share else {}
    mine.update(claimed)
    return Holding(owner, epoch, mine, live, share, released, len(claimed),
                   rows if not (released or claimed) else None, next_lapse)


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _needing_and_digest(tx: Session, owner: str) -> tuple[int, tuple[int, str] | None]:
    """How many jobs need a driver, and (PostgreSQL) the digest of ``owner``'s rows: how many and an md5 of
    every ``id:xmin``; one pass over the jobs table for both (each was a scan of its own, per daemon per tick:
    the server's work grows with the daemons)."""
    if tx.get_bind().dialect.name != "postgresql":
        return int(tx.exec(select(func.count()).select_from(Job).where(needs_driver())).one()), None
    found = tx.connection().exec_driver_sql(
        "SELECT count(*) FILTER (WHERE jobs.status <> ALL(%(final)s) OR EXISTS (SELECT 1 FROM attempts WHERE "
        "attempts.job_id = jobs.id AND attempts.state = ANY(%(live)s))), "
        "count(*) FILTER (WHERE lease_owner = %(owner)s), "
        "md5(coalesce(string_agg(id::text || ':' || xmin::text, ',' ORDER BY id) "
        "FILTER (WHERE lease_owner = %(owner)s), '')) FROM jobs",
        {"owner": owner, "final": _FINAL_JOB, "live": _LIVE_ATTEMPT}).one()
    return int(found[0]), (int(found[1]), str(found[2]))


def _held_rows(tx: Session, owner: str, known: HeldRows | None, digest: tuple[int, str] | None) -> HeldRows:
    """One read of the held rows (10k at 10k jobs on one daemon), each with whether it needs a driver; on
    PostgreSQL not when their ``digest`` (``_needing_and_digest``) is ``known``'s."""
    if digest is not None and known is not None and known.digest == digest:
        return known
    held = tx.exec(select(Job.id, Job.lease_generation, needs_driver()).where(Job.lease_owner == owner)).all()
    return HeldRows(digest or (0, ""), {int(i): int(g) for i, g, _ in held},
                    sorted(int(i) for i, _, needs in held if needs))


def claim_free(tx: Session, owner: str, count: int) -> dict[int, int]:
    """Claim up to ``count`` jobs needing a driver whose owner is no live daemon (after ``reap``); rows
    another claimer holds are skipped. Returns job id -> new generation."""
    if count <= 0:
        return {}
    registered = select(DaemonRow.owner)
    free = (select(Job.id).where(needs_driver(), or_(col(Job.lease_owner).is_(None),
                                                       col(Job.lease_owner).not_in(registered)))
            .order_by(col(Job.id)).limit(count)
            .with_for_update(skip_locked=True))   # SQLite ignores it: its database lock serialises writers
    # One statement: UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING the new generations.
    claimed = tx.execute(update(Job).where(col(Job.id).in_(free.scalar_subquery()))
                         .values(lease_owner=owner, lease_generation=Job.lease_generation + 1)
                         .returning(Job.id, Job.lease_generation))
    return {int(k): int(v) for k, v in claimed.all()}


def release(tx: Session, owner: str, job_ids: Sequence[int] | None = None) -> int:
    """Give back ``owner``'s leases (all when ``job_ids`` is None). Returns how many."""
    if job_ids is None:
        return int(tx.execute(update(Job).where(Job.lease_owner == owner).values(lease_owner=None)).rowcount or 0)
    done = 0
    for chunk in _chunks(list(job_ids)):
        done += int(tx.execute(update(Job).where(Job.lease_owner == owner, col(Job.id).in_(chunk))
                               .values(lease_owner=None)).rowcount or 0)
    return done


def lock_unheld(tx: Session, job_ids: Sequence[int]) -> list[int]:
    """Of ``job_ids``, those no daemon holds (no owner, or one whose registration was reaped, as ``claim_free``
    reads it), their rows locked FOR UPDATE in id order until ``tx`` ends: a finished job's leftover machine is
    charged by whichever daemon sees it, and the lock makes those charges take turns (each writer reads the
    stored spend mark after the one before it committed), so no interval is charged twice. A lapsed owner not
    yet reaped still holds: the reap waits for its fenced writes in flight, so none commits after this reads."""
    registered = select(DaemonRow.owner)
    found: list[int] = []
    for chunk in _chunks(sorted(set(job_ids))):
        found += [int(i) for i in tx.exec(
            select(Job.id).where(col(Job.id).in_(chunk), or_(col(Job.lease_owner).is_(None),
                                                            col(Job.lease_owner).not_in(registered)))
            .order_by(col(Job.id)).with_for_update())]
    return found


# -- the fence -----------------------------------------------------------------------------------------

def fence_daemon(tx: Session, owner: str, epoch: int, now: datetime) -> None:
    """Raise LeaseLostError unless ``owner`` is registered under ``epoch`` until after ``now``. The row is
    read FOR SHARE: no reaper deletes it before this transaction ends."""
    found = tx.exec(select(DaemonRow.owner).where(DaemonRow.owner == owner, DaemonRow.epoch == epoch,
                                                  col(DaemonRow.expires_at) > now).with_for_update(read=True)).first()
    if found is None:
        raise LeaseLostError(f"daemon {owner}: its registration lapsed; it acts again once it has claimed anew")


def fence_job(tx: Session, owner: str, epoch: int, job_id: int, generation: int | None, now: datetime) -> None:
    """Raise LeaseLostError unless ``owner`` (live under ``epoch``) holds ``job_id`` at ``generation``.

    One query for both rows (the registration and the job, each read FOR SHARE as ``fence_daemon`` reads the
    one): every fenced write paid a round trip for each before, a sixth of a launching tick's statements. Only
    a refusal asks again, to say which of the two it lost."""
    found = tx.exec(select(Job.id).join(DaemonRow, col(DaemonRow.owner) == col(Job.lease_owner))
                    .where(Job.id == job_id, Job.lease_owner == owner,
                           Job.lease_generation == (generation if generation is not None else -1),
                           DaemonRow.epoch == epoch, col(DaemonRow.expires_at) > now)
                    .with_for_update(read=True)).first()
    if found is None:
        fence_daemon(tx, owner, epoch, now)
        raise LeaseLostError(f"daemon {owner}: job {job_id} is no longer its own (generation {generation})")


def _chunks(values: Sequence[Any]) -> list[list[Any]]:
    return [list(values[i:i + _CHUNK]) for i in range(0, len(values), _CHUNK)]
