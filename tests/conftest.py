"""Suite-wide guards: no test touches the user's real config, data or cache directories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import typer

    from tests.daemon_world import Fakes
    from tests.support.forkserver import ForkServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that hold a test marked ``slow`` run first (in collection order), then the others, most tests
    first (the order pytest-xdist's ``--dist loadfile`` would choose itself). scripts/test.sh passes
    ``--no-loadscope-reorder`` so the two workers take files in this order: in xdist's own order (most tests
    first) the files of one or two long tests (e2e, crash matrices, real daemons) came last, and one worker ran
    them alone while the other sat idle. Each file's own order is kept (a crash matrix's printer runs last)."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    count: dict[Path, int] = {}
    for item in items:
        count[item.path] = count.get(item.path, 0) + 1
    items.sort(key=lambda item: (1, -count[item.path]) if item.path not in slow else (0, 0))


@pytest.fixture(scope="session")
def _schema_template(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], bytes]:
    """The bytes of a SQLite store at the head, migrated on first use in this worker."""
    from tests.support.schema_template import make_template

    made: list[bytes] = []

    def template() -> bytes:
        if not made:
            made.append(make_template(tmp_path_factory.mktemp("schema") / "head.db"))
        return made[0]

    return template


@pytest.fixture(scope="session")
def _pg_schema_template() -> Iterator[Callable[[], str]]:
    """The name of a PostgreSQL database at the head, migrated on first use in this worker (tests/_store_db.py)."""
    from tests._store_db import migrated_pg_template

    yield from migrated_pg_template()


@pytest.fixture(autouse=True)
def _new_stores_from_template(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                              _schema_template: Callable[[], bytes],
                              _pg_schema_template: Callable[[], str]) -> None:
    """A new SQLite store is a copy of the worker's migrated one (tests/support/schema_template.py), and a store
    fixture's new PostgreSQL database a copy of the worker's migrated database (tests/_store_db.py), except in the
    tests marked ``real_schema_upgrade``."""
    if request.node.get_closest_marker("real_schema_upgrade") is None:
        from tests import _store_db
        from tests.support.schema_template import install

        install(monkeypatch, _schema_template)
        monkeypatch.setattr(_store_db, "pg_template", _pg_schema_template)


@pytest.fixture(scope="session", autouse=True)
def _cli_command_built_once() -> Iterator[None]:
    """typer's ``CliRunner.invoke(app, ...)`` turns the Typer app into its click command tree on every call: ~25 ms
    of CPU for orch's (every command's signature read and converted), in several hundred calls. Built once per
    worker here, and again whenever the app's registered commands, groups or callback change; click's commands
    keep no state between invocations (each gets its own context), as in ``orch`` itself, built once a run.
    Only where a test module imported typer's CliRunner at collection (this does not import typer itself)."""
    import sys

    cli_testing = sys.modules.get("typer.testing")
    if cli_testing is None:
        yield
        return
    real = cli_testing._get_command
    built: dict[int, tuple[object, tuple[object, ...], object]] = {}

    def get_command(app: typer.Typer) -> object:
        shape = _typer_shape(app)
        kept = built.get(id(app))
        if kept is None or kept[0] is not app or kept[1] != shape:
            kept = built[id(app)] = (app, shape, real(app))
        return kept[2]

    cli_testing._get_command = get_command
    yield
    cli_testing._get_command = real


def _typer_shape(app: typer.Typer) -> tuple[object, ...]:
    """What the click command built from ``app`` depends on: its commands, callback and groups (recursively)."""
    return (app.registered_callback, app.info,
            tuple((c.name, c.callback, c.cls, c.context_settings) for c in app.registered_commands),
            tuple((g.name, _typer_shape(g.typer_instance) if g.typer_instance else None)
                  for g in app.registered_groups))


@pytest.fixture(autouse=True)
def _sqlite_commits_without_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SQLite store opened in a test commits without waiting for the disk (``PRAGMA synchronous=OFF``): at
    SQLite's default (FULL) each commit that writes waits for a few fsyncs, ~8 ms on the project's machines, and
    the engine tests commit thousands of times. What every connection reads, its locking, and what survives a
    killed process (the data is in the OS's cache before the commit returns) are the same; only an OS crash or a
    power cut could lose the last commits. orch processes the tests start keep orch's own settings."""
    import orchestrator.store.db as db

    real = db._sqlite_pragmas

    def pragmas(dbapi_conn: object, record: object) -> None:
        real(dbapi_conn, record)
        cursor = dbapi_conn.cursor()  # type: ignore[attr-defined]
        cursor.execute("PRAGMA synchronous=OFF")
        cursor.close()

    monkeypatch.setattr(db, "_sqlite_pragmas", pragmas)


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("ORCH_CONFIG", raising=False)
    monkeypatch.delenv("ORCH_DATABASE_URL", raising=False)
    monkeypatch.delenv("ORCH_CATALOG_DIR", raising=False)
    monkeypatch.delenv("ORCH_CACHE_DIR", raising=False)   # the optimum cache then lives under XDG_CACHE_HOME
    yield


@pytest.fixture()
def deadlines_out_of_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    """For engine tests about something else whose fake clocks jump past the liveness deadlines
    (orchestrator/engine/liveness.py; tested in test_liveness.py): a machine is first read by the tick after
    the one that started it, and no agent reports in them, so ``boot_timeout`` would end every machine."""
    monkeypatch.setenv("ORCH_BOOT_TIMEOUT_S", str(7 * 24 * 3600))
    monkeypatch.setenv("ORCH_HEARTBEAT_TIMEOUT_S", str(7 * 24 * 3600))


@pytest.fixture()
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test (tests/_store_db.py: skips, or fails under scripts/test.sh, when
    no server is usable)."""
    from tests._store_db import pg_database

    yield from pg_database()


@pytest.fixture()
def fakes() -> Iterator[Fakes]:
    """Every cloud's fake running on 127.0.0.1 for one test (tests/daemon_world.py ``running_fakes``)."""
    from tests.daemon_world import running_fakes

    with running_fakes() as f:
        yield f


@pytest.fixture(scope="session")
def forkserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """One warm Python per worker that forks ``python -m module ...`` children for the tests that start orch
    dozens of times (tests/support/forkserver.py); started on first use."""
    import os

    from tests.support.forkserver import started

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")} | {"PYTHONPATH": str(root)}
    # What `orch tick` and tests/support/crash_tick.py import; the server learns the rest from its children.
    warm = ("orchestrator.cli.main", "orchestrator.daemon.assembly", "orchestrator.engine.reconciler",
            "orchestrator.store.sqlstore", "orchestrator.store.leases", "orchestrator.runtime.startup")
    yield from started(tmp_path_factory.mktemp("forkserver"), root, env, warm)
