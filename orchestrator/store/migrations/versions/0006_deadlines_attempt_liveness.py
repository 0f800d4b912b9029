"""attempts: heard_at and unreachable_since (the liveness deadlines: boot, heartbeat, unreachable grace)

Revision ID: 0006_deadlines
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_deadlines"
down_revision: str | None = "0006_scale"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("heard_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("unreachable_since", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("unreachable_since")
        batch.drop_column("heard_at")
