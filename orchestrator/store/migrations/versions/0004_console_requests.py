"""console: job_requests (an operator's relaunch request for the engine) and gpu_util (per attempt, per minute)

``job_requests``: the web console's "relaunch now"; the engine takes each once (``taken_at``).
``gpu_util``: the mean and max GPU utilization of each attempt's machine per UTC minute, for the console's
sparklines; pruned after a retention period (``orchestrator.store.gpu_util``).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "job_requests",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("requested_at", _ts(), nullable=False),
        sa.Column("requested_by", sa.String(), nullable=False),
        sa.Column("taken_at", _ts(), nullable=True),
    )
    op.create_index("ix_job_requests_job_id", "job_requests", ["job_id"])
    op.create_index("ix_job_requests_taken_at", "job_requests", ["taken_at"])

    op.create_table(
        "gpu_util",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("attempt_id", sa.Integer(), sa.ForeignKey("attempts.id"), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("minute", _ts(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("mean_pct", sa.Float(), nullable=False),
        sa.Column("max_pct", sa.Float(), nullable=False),
        sa.UniqueConstraint("attempt_id", "minute", name="uq_gpu_util_attempt_minute"),
    )
    op.create_index("ix_gpu_util_job_id", "gpu_util", ["job_id"])
    op.create_index("ix_gpu_util_minute", "gpu_util", ["minute"])


def downgrade() -> None:
    op.drop_index("ix_gpu_util_minute", table_name="gpu_util")
    op.drop_index("ix_gpu_util_job_id", table_name="gpu_util")
    op.drop_table("gpu_util")
    op.drop_index("ix_job_requests_taken_at", table_name="job_requests")
    op.drop_index("ix_job_requests_job_id", table_name="job_requests")
    op.drop_table("job_requests")
