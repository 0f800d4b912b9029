"""attempts: heard_beat, the agent's own heartbeat value at ``heard_at`` (liveness survives restarts)

A restarted daemon compares an agent's heartbeat with this value to tell an agent that moved on while it was
down from a silent one, so every deadline counts from the stored marks (orchestrator/engine/liveness.py).

Revision ID: 0009_heard_beat
Revises: 0008_store_identity
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_heard_beat"
down_revision: str | None = "0008_store_identity"      # store identity (branch h28fleet) came first
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("heard_beat", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("heard_beat")
