"""Alembic environment for orch's store.

orch passes an open connection in ``config.attributes["connection"]``; run by hand, the URL is
``sqlalchemy.url`` from the config, else ORCH_DATABASE_URL, else the default SQLite file.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlmodel import SQLModel

import orchestrator.store.models  # noqa: F401  (registers the tables on SQLModel.metadata)

config = context.config
target_metadata = SQLModel.metadata


def _url() -> str:
    from orchestrator.store.db import database_url

    return config.get_main_option("sqlalchemy.url") or database_url()


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return
    engine = create_engine(_url())
    try:
        with engine.connect() as conn:
            _migrate(conn)
    finally:
        engine.dispose()


def _migrate(connection: object) -> None:
    # render_as_batch: SQLite cannot ALTER most things; batch mode copies the table instead.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True,
                      compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
