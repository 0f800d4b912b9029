"""attempts: end_cause and drain_until (typed end causes instead of reason text)

Rows written before this revision carry their cause only in ``reason`` text; the two the engine acts on
are carried over: a machine stopped on purpose when idle (kept, with its disk) and a noticed machine (or
gang node) that drains for the default notice window (120 s) after it ended.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-09
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("end_cause", sa.String(), nullable=True))
        batch.add_column(sa.Column("drain_until", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_attempts_drain_until", ["drain_until"])
    op.execute("UPDATE attempts SET end_cause = 'idle-stopped' WHERE reason = 'idle: stopped'")
    op.execute("UPDATE attempts SET end_cause = 'gang' WHERE reason LIKE 'notice: gang%'")
    op.execute("UPDATE attempts SET end_cause = 'noticed' WHERE end_cause IS NULL AND reason LIKE 'notice%'")
    later = ("datetime(ended_at, '+120 seconds')" if op.get_context().dialect.name == "sqlite"
             else "ended_at + interval '120 seconds'")
    op.execute(f"UPDATE attempts SET drain_until = {later} "
               "WHERE ended_at IS NOT NULL AND reason LIKE 'notice%'")


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_index("ix_attempts_drain_until")
        batch.drop_column("drain_until")
        batch.drop_column("end_cause")
