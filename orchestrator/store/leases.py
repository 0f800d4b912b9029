"""One daemon per SQLite store: an OS lock on the database file (``daemon_lock``).

SQLite has no row locks, so there one daemon runs at a time. On PostgreSQL several daemons share the jobs
through leases instead (orchestrator/store/fleet.py: a registry with heartbeats, shares claimed with
``SELECT ... FOR UPDATE SKIP LOCKED``, a generation per lease that fences every write).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.store.db import Store


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
