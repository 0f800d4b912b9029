"""initial: jobs, instances, attempts, checkpoints, events, spend

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(63), nullable=False, unique=True),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("manifest_hash", sa.String(80), nullable=False),
        sa.Column("source_path", sa.String(), nullable=True),
        sa.Column("desired_state", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("status_reason", sa.String(), nullable=True),
        sa.Column("applied_at", _ts(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.Column("relaunch_count", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(), nullable=True),
        sa.Column("lease_expires_at", _ts(), nullable=True),
    )
    op.create_index("ix_jobs_desired_state", "jobs", ["desired_state"])
    op.create_index("ix_jobs_status", "jobs", ["status"])

    op.create_table(
        "instances",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("instance_id", sa.String(), nullable=True),
        sa.Column("launch_id", sa.String(64), nullable=False, unique=True),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id"), nullable=True),
        sa.Column("instance_type", sa.String(), nullable=False),
        sa.Column("region", sa.String(), nullable=False),
        sa.Column("zone", sa.String(), nullable=True),
        sa.Column("market", sa.String(), nullable=False),
        sa.Column("price_hr", sa.Float(), nullable=False),
        sa.Column("gpu", sa.String(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("raw_state", sa.String(), nullable=True),
        sa.Column("public_ip", sa.String(), nullable=True),
        sa.Column("ssh_port", sa.Integer(), nullable=True),
        sa.Column("ssh_user", sa.String(), nullable=True),
        sa.Column("host_keys", sa.JSON(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.Column("terminated_at", _ts(), nullable=True),
    )
    op.create_index("ix_instances_instance_id", "instances", ["instance_id"])
    op.create_index("ix_instances_job_id", "instances", ["job_id"])
    op.create_index("ix_instances_state", "instances", ["state"])

    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("launch_id", sa.String(64), nullable=False, unique=True),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("started_at", _ts(), nullable=True),
        sa.Column("ended_at", _ts(), nullable=True),
        sa.Column("checkpoint_restored", sa.String(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
    )
    op.create_index("ix_attempts_job_id", "attempts", ["job_id"])
    op.create_index("ix_attempts_state", "attempts", ["state"])

    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("attempt_id", sa.Integer(), sa.ForeignKey("attempts.id"), nullable=True),
        sa.Column("uri", sa.String(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("committed_at", _ts(), nullable=False),
    )
    op.create_index("ix_checkpoints_job_id", "checkpoints", ["job_id"])

    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("ts", _ts(), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id"), nullable=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("message", sa.String(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
    )
    op.create_index("ix_events_ts", "events", ["ts"])
    op.create_index("ix_events_job_id", "events", ["job_id"])
    op.create_index("ix_events_kind", "events", ["kind"])

    op.create_table(
        "spend",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("attempt_id", sa.Integer(), sa.ForeignKey("attempts.id"), nullable=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("from_ts", _ts(), nullable=False),
        sa.Column("to_ts", _ts(), nullable=False),
        sa.Column("usd", sa.Float(), nullable=False),
    )
    op.create_index("ix_spend_attempt_id", "spend", ["attempt_id"])
    op.create_index("ix_spend_job_id", "spend", ["job_id"])


def downgrade() -> None:
    for table in ("spend", "events", "checkpoints", "attempts", "instances", "jobs"):
        op.drop_table(table)
