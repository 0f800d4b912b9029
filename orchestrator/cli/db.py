"""``orch db upgrade`` and ``orch db current``: the store's schema migrations."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from orchestrator.cli.common import fail_store
from orchestrator.cli.errors import fail
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app
from orchestrator.words import reason

db_app = typer.Typer(help="The state store (SQLite file, or PostgreSQL via ORCH_DATABASE_URL).",
                     no_args_is_help=True)
app.add_typer(db_app, name="db")

UrlOpt = Annotated[str | None, typer.Option("--url", help="Database URL (default: $ORCH_DATABASE_URL, "
                                                          "else the SQLite file in orch's data directory).")]


@db_app.command("upgrade")
def upgrade_cmd(url: UrlOpt = None, revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
                ) -> None:
    """Bring the database schema up to date (alembic upgrade head)."""
    from orchestrator.store.db import StoreError, current_revision, database_url, make_engine, redact, upgrade

    target = url or database_url()
    try:
        engine = make_engine(target)
        try:
            before = current_revision(engine)
            upgrade(engine, revision)
            after = current_revision(engine)
        finally:
            engine.dispose()
    except StoreError as exc:
        fail_store(exc)
    except Exception as exc:
        fail(f"cannot upgrade {redact(target)}: {reason(exc)}", code=1)
    if before == after:
        sys.stdout.write(f"{redact(target)}: already at {after}\n")
    else:
        sys.stdout.write(f"{redact(target)}: upgraded {before or '(empty)'} -> {after}\n")


@db_app.command("current")
def current_cmd(
    url: UrlOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="The revisions as JSON (errors too).")] = False,
) -> None:
    """Show the database's schema revision and the newest this orch knows."""
    from orchestrator.store.db import (
        StoreError,
        current_revision,
        database_url,
        head_revision,
        make_engine,
        missing_sqlite_file,
        redact,
    )

    target = url or database_url()
    if missing_sqlite_file(target) is not None:  # a read: no file (nor its folders) is created for it
        head = head_revision()
        if as_json:
            sys.stdout.write(dumps({"url": redact(target), "current": None, "head": head, "up_to_date": False,
                                    "exists": False}) + "\n")
        else:
            sys.stdout.write(f"{redact(target)}: no database yet (head {head}; `orch db upgrade` creates it)\n")
        return
    try:
        engine = make_engine(target)
        try:
            current = current_revision(engine)
        finally:
            engine.dispose()
        head = head_revision()
    except StoreError as exc:
        fail_store(exc, as_json)
    except Exception as exc:
        fail(f"cannot read {redact(target)}: {reason(exc)}", code=1, as_json=as_json)
    if as_json:

        sys.stdout.write(dumps({"url": redact(target), "current": current, "head": head,
                                     "up_to_date": current == head, "exists": True}) + "\n")
        return
    state = "up to date" if current == head else "run `orch db upgrade`"
    sys.stdout.write(f"{redact(target)}: {current or '(empty)'} (head {head}; {state})\n")
