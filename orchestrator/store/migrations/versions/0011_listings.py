"""listings: one provider's cloud listing, published for the fleet

Several daemons on one PostgreSQL store used to list every cloud each, every tick: cloud API calls grew with the
number of daemons. From this revision one daemon per provider per tick lists, and publishes the listing here for
the others (orchestrator/store/listings.py, orchestrator/daemon/fencing.py).

Revision ID: 0011_listings
Revises: 0010_event_repeats
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_listings"
down_revision: str | None = "0010_event_repeats"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "listings",
        sa.Column("provider", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(140), primary_key=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("listed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lister", sa.String(140), nullable=True),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("instances", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("listings")
