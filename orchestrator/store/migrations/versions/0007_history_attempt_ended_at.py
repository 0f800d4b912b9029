"""attempts: an index on ended_at (the fleet's spot history reads the machines up in the last days)

Revision ID: 0007_history
Revises: 0006_deadlines
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007_history"
down_revision: str | None = "0006_deadlines"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_attempts_ended_at", "attempts", ["ended_at"])


def downgrade() -> None:
    op.drop_index("ix_attempts_ended_at", table_name="attempts")
