"""events: count and last_ts (a repeated condition is one event, updated in place)

A waiting job used to write one ``no-offer`` (or ``budget-refused``, ``waiting``, ...) row per tick: 5,760 a day
at the default interval. From this revision a repeat of the same condition (same job, kind and message, with
no other kind of event of that job in between) raises ``count`` and moves ``last_ts`` of the row it repeats.
Existing rows are one occurrence each, seen last when they were written.

Revision ID: 0010_event_repeats
Revises: 0009_heard_beat
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_event_repeats"
down_revision: str | None = "0009_heard_beat"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("count", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("last_ts", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE events SET last_ts = ts")


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_column("last_ts")
        batch.drop_column("count")
