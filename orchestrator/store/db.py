"""Where the store lives and how it is opened: engine, sessions, and schema upgrades.

URL: ``$ORCH_DATABASE_URL`` (e.g. ``postgresql+psycopg://orch@db/orch``), else the SQLite file
``<data dir>/orch.db``. A new, empty database is brought to the latest schema on first open; an
existing one behind the code must be upgraded on purpose with ``orch db upgrade``.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import DisconnectionError
from sqlmodel import Session, create_engine

from orchestrator.store.listen import EventFeed, EventListener
from orchestrator.words import reason

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"   # shipped inside the package
_PG_UPGRADE_LOCK = 0x6F726368   # "orch": one process upgrades a PostgreSQL schema at a time
IDLE_TX_TIMEOUT_MS = 30_000      # below the default lease TTL (90 s), so a stopped daemon's locks go in time


class StoreFault(StrEnum):
    """Why the store cannot be used, so every command answers one cause with one exit code."""

    BAD_URL = "bad-url"      # the URL itself is wrong (unparsable, another database, no file, another driver)
    FAILED = "failed"        # the URL is fine, using it failed: unreachable, refused, schema to upgrade, no driver


class StoreError(RuntimeError):
    """The store cannot be used as it is; the message says what to do, ``fault`` which kind of problem it is."""

    def __init__(self, message: str, fault: StoreFault = StoreFault.FAILED) -> None:
        super().__init__(message)
        self.fault = fault


def database_url() -> str:
    explicit = os.environ.get("ORCH_DATABASE_URL")
    if explicit:
        return explicit
    from orchestrator.config.file import data_dir

    return f"sqlite:///{data_dir() / 'orch.db'}"


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is reported by create_engine; never echo a password
        return "<unparsable database URL>"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def _create_private(database: Path) -> None:
    """A new SQLite store is its owner's alone: its directory is made 0700 and the database file 0600
    (created so, never chmod-ed after), and SQLite gives its journal and WAL files the database's mode.
    Existing files and directories are left as they are."""
    try:
        if not database.parent.exists():
            database.parent.mkdir(parents=True, mode=0o700)
        fd = os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StoreError(f"cannot create the store at {database}: {exc.strerror or exc}") from None
    os.close(fd)


def _sqlite_file(parsed: URL) -> Path | None:
    """The file a SQLite URL names (None: another backend, or an in-memory database)."""
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database).expanduser()


def missing_sqlite_file(url: str) -> Path | None:
    """The SQLite file ``url`` names when it does not exist yet (None: another backend, memory, or it exists):
    what reads a store without changing it (``orch db current``) says so rather than create it."""
    try:
        path = _sqlite_file(make_url(url))
    except Exception:
        return None     # make_engine reports the bad URL
    return None if path is None or path.exists() else path


def make_engine(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except Exception as exc:
        raise StoreError(f"bad database URL {redact(url)!r}: {exc}", StoreFault.BAD_URL) from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(f"orch's store runs on SQLite or PostgreSQL, not {parsed.get_backend_name()} "
                         "(sqlite:///path/orch.db or postgresql+psycopg://user@host/db)", StoreFault.BAD_URL)
    if parsed.get_backend_name() == "sqlite":
        database = _sqlite_file(parsed)
        if database is None:
            # An in-memory store forgets everything when the command ends: a machine `orch apply` launched there
            # would bill on with no record of it, and no later orch (another store) would ever end it.
            from orchestrator.redaction import shown

            raise StoreError(f"{shown(url)} names no file: an in-memory store forgets every job and machine when "
                             "the command ends, and a machine it launched would be left running; name a file "
                             "(sqlite:///path/orch.db)", StoreFault.BAD_URL)
        _create_private(database)
        engine = create_engine(url, connect_args={"timeout": 10})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() not in ("psycopg", ""):
        raise StoreError(f"use the psycopg 3 driver: postgresql+psycopg://... (got {parsed.drivername})",
                         StoreFault.BAD_URL)
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "":
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    try:
        # A process stopped inside a transaction (SIGSTOP, a partition) must not hold its row locks, and with
        # them other daemons' claims, for ever: the server ends such a transaction after a while.
        # TimeZone=UTC: psycopg then hands out timestamps in datetime.UTC (orchestrator/store/plain_rows.py).
        engine = create_engine(url, connect_args={"options": f"-c idle_in_transaction_session_timeout="
                                                             f"{IDLE_TX_TIMEOUT_MS} -c TimeZone=UTC"})
    except ImportError as exc:
        raise StoreError(f"the driver for {redact(url)} is not installed ({exc.name}); "
                         "pip install 'orch[postgres]'") from None
    _ping_when_idle(engine)
    return engine


#: A pooled PostgreSQL connection idle for longer than this is pinged before it is handed out.
PING_AFTER_IDLE_S = 1.0
_IDLE_SINCE = "orch.idle_since"


def _ping_when_idle(engine: Engine) -> None:
    """``pool_pre_ping``, but only for a connection idle for over ``PING_AFTER_IDLE_S``: a connection the server
    dropped while the daemon slept between ticks (a restart, a timeout) is found and replaced before a tick's
    first transaction uses it, as before; the tick's next transactions, milliseconds later on the same
    connection, are not pinged (each ping was a round trip and two autocommit switches: ~15% of a fleet
    daemon's steady tick CPU at 100 held jobs, paid by every daemon, tests/bench/bench_tick.py --profile). A
    connection lost within a tick fails that transaction, which the pool then replaces (its error reaches the
    tick, as any store error does)."""

    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def used(_dbapi: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def checkout(dbapi: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is not None and time.monotonic() - since <= PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(f"the pooled connection is gone: {exc}") from exc   # the pool reconnects


def alembic_config(connection: Connection | None = None) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def head_revision() -> str:
    """The newest migration shipped with this orch. Read once per process: the scripts ship inside the package
    and do not change under it, and reading them (alembic loads every script) cost ~18 ms of CPU per store
    opened, most of ``open_store``'s own work."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise StoreError(f"no migrations found in {MIGRATIONS_DIR}")
    return head


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Run the migrations up to ``revision`` in one transaction (PostgreSQL: under an advisory lock)."""
    from alembic import command

    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_UPGRADE_LOCK})
        command.upgrade(alembic_config(conn), revision)


@contextmanager
def _sqlite_schema_lock(engine: Engine) -> Iterator[None]:
    """Two processes opening one new SQLite file at once must not both create the schema: the second
    would see half-made tables. PostgreSQL serialises this with an advisory lock inside ``upgrade``."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    import fcntl

    lock = Path(database).with_name(Path(database).name + ".schema-lock")
    lock.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def ensure_schema(engine: Engine) -> None:
    """Upgrade a database with no orch tables; refuse one whose schema is not the code's."""
    with _sqlite_schema_lock(engine):
        _ensure_schema(engine)


def _ensure_schema(engine: Engine) -> None:
    head = head_revision()
    current = current_revision(engine)
    if current == head:
        return
    if current is None:
        names = set(inspect(engine).get_table_names())
        if names & {"jobs", "instances", "attempts"}:
            raise StoreError(f"{redact(str(engine.url))} has orch-like tables but no migration record; "
                             "point ORCH_DATABASE_URL at an empty database")
        upgrade(engine)
        return
    from alembic.script import ScriptDirectory

    known = {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if current not in known:
        raise StoreError(f"the database schema ({current}) is newer than this orch knows (head {head}); "
                         "upgrade orch")
    raise StoreError(f"the database schema is at {current}, this orch needs {head}: run `orch db upgrade`")


@dataclass
class Store:
    """An opened store. ``transaction()`` is the unit of work: all of it commits, or none of it.
    Listeners (``add_event_listener``) hear of the events a transaction wrote once it has committed."""

    engine: Engine
    feed: EventFeed = field(default_factory=EventFeed)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def url(self) -> str:
        return redact(self.engine.url.render_as_string(hide_password=False))

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session in one transaction; commits on success, rolls back on any exception.

        Rows stay readable after the block (no expiry on commit), detached from the session.
        """
        with Session(self.engine, expire_on_commit=False) as session:
            self.feed.watch(session)
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise
            self.feed.deliver(session, self.engine)

    def add_event_listener(self, listener: EventListener) -> None:
        """Hand ``listener`` every committed event of its ``kinds`` (orchestrator.store.listen)."""
        self.feed.listeners.append(listener)

    def close(self) -> None:
        """Close the listeners (they finish what is quick), then the connections."""
        self.feed.close()
        self.engine.dispose()


def open_store(url: str | None = None, *, auto_upgrade: bool = True) -> Store:
    """Open the store at ``url`` (default: database_url()), creating the schema in an empty database."""
    engine = make_engine(url or database_url())
    try:
        if auto_upgrade:
            ensure_schema(engine)
    except StoreError:
        engine.dispose()
        raise
    except Exception as exc:
        engine.dispose()
        raise StoreError(f"cannot open the store at {redact(url or database_url())}: {reason(exc)}") from exc
    return Store(engine)
