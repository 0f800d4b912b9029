"""daemons (heartbeats of the daemons sharing a store) and jobs.lease_generation (the fence)

A job's lease now holds while its owner's registration in ``daemons`` is live, instead of each job row
carrying its own expiry (renewing thousands of rows every tick cost more than the tick): the per-job
``lease_expires_at`` goes. Leases taken before this revision are dropped (a daemon takes them again on its
next tick).

Revision ID: 0006_scale
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_scale"
down_revision: str | None = "0006_wiring"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "daemons",
        sa.Column("owner", sa.String(140), primary_key=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_daemons_expires_at", "daemons", ["expires_at"])
    op.execute("UPDATE jobs SET lease_owner = NULL")
    # Plain ALTERs, no batch copy of ``jobs`` (other tables' foreign keys point at it; SQLite >= 3.35 drops
    # a column in place).
    op.add_column("jobs", sa.Column("lease_generation", sa.Integer(), nullable=False, server_default="0"))
    op.execute("ALTER TABLE jobs DROP COLUMN lease_expires_at")
    op.create_index("ix_jobs_lease_owner", "jobs", ["lease_owner"])


def downgrade() -> None:
    op.drop_index("ix_jobs_lease_owner", table_name="jobs")
    op.add_column("jobs", sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("ALTER TABLE jobs DROP COLUMN lease_generation")
    op.execute("UPDATE jobs SET lease_owner = NULL")
    op.drop_index("ix_daemons_expires_at", table_name="daemons")
    op.drop_table("daemons")
