"""instances: actual_price_hr (the $/h the cloud reports for the machine, beside the quoted price_hr)

NULL where the cloud reports no price (or before the engine records it): the quoted price stands.

Revision ID: 0003
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("actual_price_hr", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("actual_price_hr")
