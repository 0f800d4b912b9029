"""store_changes: a count of the transactions that wrote jobs and attempts, kept by the server

Each daemon of a fleet digested, every tick, the fleet's job and attempt rows (an md5 over every ``id:xmin``) to
learn whether anybody wrote them: at 10k jobs ~25 ms of PostgreSQL's time per daemon per tick, so K daemons
cost the server K times one's. From this revision the server counts, in one row, the committed transactions
that wrote each table; a steady tick reads that row, and digests only when a count moved
(orchestrator/store/changes.py).

PostgreSQL: a deferred constraint trigger on each table bumps the row once per writing transaction, at its
commit (after every other lock the transaction takes: the row is held only while it commits, so no writer
waits on it holding anything else); a transaction that rolls back bumps nothing. SQLite: the table only (its
``PRAGMA data_version`` already tells a reader whether anybody wrote).

Revision ID: 0012_store_changes
Revises: 0011_listings
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_store_changes"
down_revision: str | None = "0011_listings"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Bumps the table's count once per transaction: the first row event at commit bumps and marks the
#: transaction (a setting local to it); the others (a claim of 10k rows queues 10k) only read the mark.
_FUNCTION = """
CREATE FUNCTION orch_count_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_TABLE_NAME = 'jobs' THEN
    IF current_setting('orch.counted_jobs', true) IS DISTINCT FROM '1' THEN
      UPDATE store_changes SET jobs = jobs + 1 WHERE id = 1;
      PERFORM set_config('orch.counted_jobs', '1', true);
    END IF;
  ELSIF current_setting('orch.counted_attempts', true) IS DISTINCT FROM '1' THEN
    UPDATE store_changes SET attempts = attempts + 1 WHERE id = 1;
    PERFORM set_config('orch.counted_attempts', '1', true);
  END IF;
  RETURN NULL;
END $$
"""

_TABLES = ("jobs", "attempts")


def upgrade() -> None:
    table = op.create_table(
        "store_changes",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("jobs", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(table, [{"id": 1, "jobs": 0, "attempts": 0}])
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(_FUNCTION)
    for name in _TABLES:
        op.execute(f"CREATE CONSTRAINT TRIGGER {name}_count_change AFTER INSERT OR UPDATE OR DELETE ON {name} "
                   "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION orch_count_change()")
        # TRUNCATE has no row events: counted at once (nothing else is locked after it in a truncating
        # transaction that matters here: an operator's, not a daemon's).
        op.execute(f"CREATE TRIGGER {name}_count_truncate AFTER TRUNCATE ON {name} "
                   "FOR EACH STATEMENT EXECUTE FUNCTION orch_count_change()")


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        for name in _TABLES:
            op.execute(f"DROP TRIGGER IF EXISTS {name}_count_truncate ON {name}")
            op.execute(f"DROP TRIGGER IF EXISTS {name}_count_change ON {name}")
        op.execute("DROP FUNCTION IF EXISTS orch_count_change()")
    op.drop_table("store_changes")
