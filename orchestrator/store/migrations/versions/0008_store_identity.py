"""store_identity: one row naming this store (a random id drawn once), carried in every launch id

Two stores sharing a cloud account and an owner name used to end each other's machines as orphans. A
launch id now carries its store's id (``providers.base.new_launch_id``), and the sweep ends only orphans
of its own store (orchestrator/engine/sweep.py).

Revision ID: 0008_store_identity
Revises: 0007_history
Create Date: 2026-12-06
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0008_store_identity"
down_revision: str | None = "0007_history"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "store_identity",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("store_id", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    # Drawn once, here: every daemon and CLI on this store reads the same id from now on.
    op.bulk_insert(table, [{"id": 1, "store_id": secrets.token_hex(4), "created_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.drop_table("store_identity")
