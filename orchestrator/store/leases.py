"""Who works on which job: row leases, so several daemons can share one PostgreSQL store.

A daemon takes leases on jobs (``lease_owner``, ``lease_expires_at``) and renews them every tick; a
lease that is not renewed expires and another daemon takes the job over. On PostgreSQL the claim is
``SELECT ... FOR UPDATE SKIP LOCKED``: two daemons claiming at once get different rows and never wait
on each other. SQLite has no row locks, so there one daemon runs at a time, guarded by an OS lock on
the database file itself (``daemon_lock``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import or_
from sqlmodel import Session, col, select

from orchestrator.clock import utcnow
from orchestrator.store.db import Store
from orchestrator.store.models import DesiredState, Job

DEFAULT_TTL = timedelta(seconds=90)


def claim_jobs(tx: Session, owner: str, *, ttl: timedelta = DEFAULT_TTL, limit: int | None = None,
               desired_states: Sequence[DesiredState] = (DesiredState.ACTIVE, DesiredState.PRUNED,
                                                         DesiredState.DELETED),
               now: datetime | None = None) -> list[Job]:
    """Lease to ``owner`` the jobs that are free, expired, or already its own; return them.

    Rows another transaction is claiming right now are skipped (PostgreSQL), not waited for. The
    leases hold once the caller's transaction commits.
    """
    now = now or utcnow()
    query = (
        select(Job)
        .where(col(Job.desired_state).in_([s.value for s in desired_states]))
        .where(or_(col(Job.lease_owner).is_(None), Job.lease_owner == owner,
                   col(Job.lease_expires_at).is_(None), col(Job.lease_expires_at) <= now))
        .order_by(col(Job.id))
        .with_for_update(skip_locked=True)   # SQLite ignores it: the database lock serialises writers
    )
    if limit is not None:
        query = query.limit(limit)
    jobs = list(tx.exec(query))
    for job in jobs:
        job.lease_owner = owner
        job.lease_expires_at = now + ttl
        tx.add(job)
    tx.flush()
    return jobs


def renew_leases(tx: Session, owner: str, job_ids: Sequence[int], *, ttl: timedelta = DEFAULT_TTL,
                 now: datetime | None = None) -> list[int]:
    """Extend ``owner``'s leases; return the ids still held (a lost lease is not renewed)."""
    now = now or utcnow()
    held = list(tx.exec(select(Job).where(col(Job.id).in_(list(job_ids)), Job.lease_owner == owner,
                                          col(Job.lease_expires_at) > now).with_for_update()))
    for job in held:
        job.lease_expires_at = now + ttl
        tx.add(job)
    tx.flush()
    return sorted(j.id for j in held if j.id is not None)


def release_leases(tx: Session, owner: str, job_ids: Sequence[int] | None = None) -> int:
    """Give up ``owner``'s leases (all of them when ``job_ids`` is None); return how many."""
    query = select(Job).where(Job.lease_owner == owner)
    if job_ids is not None:
        query = query.where(col(Job.id).in_(list(job_ids)))
    jobs = list(tx.exec(query.with_for_update()))
    for job in jobs:
        job.lease_owner = None
        job.lease_expires_at = None
        tx.add(job)
    tx.flush()
    return len(jobs)


def holds_lease(job: Job, owner: str, now: datetime | None = None) -> bool:
    now = now or utcnow()
    return job.lease_owner == owner and job.lease_expires_at is not None and job.lease_expires_at > now


class DaemonAlreadyRunningError(RuntimeError):
    pass


def database_file(store: Store) -> Path | None:
    """The SQLite database file of ``store``; None for a server database or an in-memory one."""
    if store.dialect != "sqlite":
        return None
    database = store.engine.url.database
    if not database or database == ":memory:":
        return None
    return Path(database).expanduser()


def lock_path(store: Store) -> Path | None:
    """Where the daemon holding a SQLite store writes its pid (``orch.db.lock`` beside the file the
    name resolves to); None for a server database. The lock itself is on the database file."""
    database = database_file(store)
    if database is None:
        return None
    real = database.resolve()
    return real.with_name(real.name + ".lock")


@contextmanager
def daemon_lock(store: Store) -> Iterator[None]:
    """Hold the one-daemon lock of a SQLite store for the block; a no-op on PostgreSQL (leases do it).

    The lock is an OS lock (flock) on the database FILE itself, so it follows the file's identity: two
    daemons reaching one file by different names (a symlink, a hardlink, a bind mount, ``..``) contend
    for the same lock. SQLite's own locks are POSIX byte-range locks, which flock does not interact with
    on a local file system (keep a SQLite store on a local disk). The lock vanishes with the process, so
    a crashed daemon leaves nothing stale. Raises DaemonAlreadyRunningError, naming the holder's pid
    (from the note beside the file, where it can be found), when another process holds it.
    """
    database = database_file(store)
    if database is None:
        yield
        return
    import fcntl

    flags = os.O_RDONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(database, flags, 0o600)
    except OSError as exc:
        raise DaemonAlreadyRunningError(f"cannot open {database} to lock it: {exc.strerror or exc}") from None
    note = lock_path(store)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DaemonAlreadyRunningError(
                f"another orch daemon (pid {_holder(note)}) is using {database}; stop it first, or use "
                f"PostgreSQL (ORCH_DATABASE_URL=postgresql+psycopg://...) to run several daemons at once "
                f"(lock file: {note})"
            ) from None
        _write_note(note, f"{os.getpid()}\n")
        try:
            yield
        finally:
            _write_note(note, "")
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _holder(note: Path | None) -> str:
    try:
        text = note.read_text(errors="replace").strip()[:20] if note is not None else ""
    except OSError:
        text = ""
    return text if text.isdigit() else "unknown"


def _write_note(note: Path | None, text: str) -> None:
    """The holder's pid, for the next one's message only (the lock is the flock): best effort, 0600."""
    if note is None:
        return
    try:
        fd = os.open(note, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        return
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)
    except OSError:
        pass
    finally:
        os.close(fd)
