"""Migrations: upgrade head creates exactly the models' schema; down and up again work; on both databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Engine
from sqlmodel import SQLModel

import orchestrator.store.models  # noqa: F401
from orchestrator.store.db import (
    MIGRATIONS_DIR,
    StoreError,
    alembic_config,
    current_revision,
    head_revision,
    make_engine,
    open_store,
    upgrade,
)
from tests._store_db import BACKENDS, database_url_for

#: The migrations run here as they run for a user: no template store (tests/support/schema_template.py).
pytestmark = pytest.mark.real_schema_upgrade

TABLES = {"jobs", "daemons", "instances", "attempts", "checkpoints", "events", "spend", "job_requests", "gpu_util"}


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    for url in database_url_for(request.param, tmp_path):
        e = make_engine(url)
        try:
            yield e
        finally:
            e.dispose()


def test_migrations_dir_is_the_packaged_one() -> None:
    assert Path(__file__).resolve().parents[1] / "orchestrator" / "store" / "migrations" == MIGRATIONS_DIR
    assert (MIGRATIONS_DIR / "versions" / "0001_initial.py").exists()
    assert head_revision() == "0013_store_changes_requests"


def test_upgrade_head_matches_the_models(engine: Engine) -> None:
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    assert set(inspect(engine).get_table_names()) >= TABLES
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), SQLModel.metadata)
    assert diff == []


def test_downgrade_to_base_and_up_again(engine: Engine) -> None:
    upgrade(engine)
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "base")
    assert TABLES.isdisjoint(inspect(engine).get_table_names())
    upgrade(engine)
    assert current_revision(engine) == head_revision()


def test_open_store_upgrades_an_empty_database_and_refuses_an_old_one(engine: Engine) -> None:
    url = engine.url.render_as_string(hide_password=False)
    open_store(url).close()
    assert current_revision(engine) == head_revision()
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "base")
        command.stamp(alembic_config(conn), "base")
    # Tables with no migration record (someone's create_all): refused rather than guessed at.
    SQLModel.metadata.create_all(engine)
    with pytest.raises(StoreError, match="no migration record"):
        open_store(url)


def test_unknown_revision_in_the_database_is_refused(engine: Engine) -> None:
    upgrade(engine)
    from sqlalchemy import text

    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    with pytest.raises(StoreError, match="newer than this orch"):
        open_store(engine.url.render_as_string(hide_password=False))


def test_offline_sql_renders(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = alembic_config()
    cfg.set_main_option("sqlalchemy.url", "postgresql+psycopg://u@h/d")
    command.upgrade(cfg, "head", sql=True)
    out = capsys.readouterr().out
    assert "CREATE TABLE jobs" in out and "TIMESTAMP WITH TIME ZONE" in out


def test_orch_db_upgrade_and_current_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    url = f"sqlite:///{tmp_path / 'cli' / 'orch.db'}"
    monkeypatch.setenv("ORCH_DATABASE_URL", url)
    runner = CliRunner()
    result = runner.invoke(app, ["db", "current"])  # no file yet: said so, and none is made
    assert result.exit_code == 0 and "no database yet" in result.stdout and "`orch db upgrade`" in result.stdout
    assert not (tmp_path / "cli").exists()
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0 and f"upgraded (empty) -> {head_revision()}" in result.stdout
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0 and f"already at {head_revision()}" in result.stdout
    result = runner.invoke(app, ["db", "current"])
    assert result.exit_code == 0 and f"{head_revision()} (head {head_revision()}; up to date)" in result.stdout
    result = runner.invoke(app, ["db", "current", "--url", "mysql://u:secret@h/d"])
    assert result.exit_code == 2 and "SQLite or PostgreSQL" in result.stderr and "secret" not in result.stderr


def test_0005_carries_the_causes_the_engine_acts_on_over_from_reason_text(engine: Engine) -> None:
    """Rows of a store from before 0005: an idle-stopped machine stays kept and a noticed one drains after the
    upgrade."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import text

    from orchestrator.engine.states import EndCause
    from orchestrator.store.models import Attempt

    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0004")
    ended = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    stamp = ended if engine.dialect.name == "postgresql" else ended.replace(tzinfo=None)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO jobs (id, name, manifest, manifest_hash, desired_state, status, applied_at, "
                          "created_at, updated_at, relaunch_count) VALUES (1, 'j', '{}', 'h', 'active', "
                          "'running', :t, :t, :t, 0)"), {"t": stamp})
        for i, reason in enumerate(["idle: stopped", "notice: aws spot-interruption (agent, k)",
                                    "notice: gang node 1 preempted", "job exited 0"], start=1):
            conn.execute(text("INSERT INTO attempts (id, job_id, generation, node_rank, launch_id, state, ended_at, "
                              "reason, created_at, updated_at) VALUES (:i, 1, 1, 0, :l, 'terminated', :t, :r, :t, :t)"),
                         {"i": i, "l": f"l{i:012d}", "t": stamp, "r": reason})
    upgrade(engine)
    from sqlmodel import Session, col, select

    with Session(engine) as tx:
        rows = {a.id: a for a in tx.exec(select(Attempt).order_by(col(Attempt.id)))}
    drained = ended + timedelta(seconds=120)
    assert (rows[1].end_cause, rows[1].drain_until) == (EndCause.IDLE_STOPPED.value, None)
    assert (rows[2].end_cause, rows[2].drain_until) == (EndCause.NOTICED.value, drained)
    assert (rows[3].end_cause, rows[3].drain_until) == (EndCause.GANG.value, drained)
    assert (rows[4].end_cause, rows[4].drain_until) == (None, None)
