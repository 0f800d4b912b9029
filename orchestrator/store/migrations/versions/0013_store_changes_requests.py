"""store_changes.requests: the server counts the transactions that wrote job_requests too

A fleet daemon read the open relaunch requests every tick (a join of job_requests and jobs, a transaction of its
own): at 10k jobs and four daemons, four transactions a round that find nothing. From this revision the
``store_changes`` row (0012) also counts the committed transactions that wrote ``job_requests``, and a daemon
reads the open requests again only when that count (or the jobs') moved since its last read
(orchestrator/store/sqlstore_side.py ``relaunch_requests``).

Revision ID: 0013_store_changes_requests
Revises: 0012_store_changes
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_store_changes_requests"
down_revision: str | None = "0012_store_changes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: 0012's function with a branch for job_requests (the same once-per-transaction mark).
_FUNCTION = """
CREATE OR REPLACE FUNCTION orch_count_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_TABLE_NAME = 'jobs' THEN
    IF current_setting('orch.counted_jobs', true) IS DISTINCT FROM '1' THEN
      UPDATE store_changes SET jobs = jobs + 1 WHERE id = 1;
      PERFORM set_config('orch.counted_jobs', '1', true);
    END IF;
  ELSIF TG_TABLE_NAME = 'job_requests' THEN
    IF current_setting('orch.counted_requests', true) IS DISTINCT FROM '1' THEN
      UPDATE store_changes SET requests = requests + 1 WHERE id = 1;
      PERFORM set_config('orch.counted_requests', '1', true);
    END IF;
  ELSIF current_setting('orch.counted_attempts', true) IS DISTINCT FROM '1' THEN
    UPDATE store_changes SET attempts = attempts + 1 WHERE id = 1;
    PERFORM set_config('orch.counted_attempts', '1', true);
  END IF;
  RETURN NULL;
END $$
"""

_PREVIOUS = """
CREATE OR REPLACE FUNCTION orch_count_change() RETURNS trigger LANGUAGE plpgsql AS $$
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


def upgrade() -> None:
    op.add_column("store_changes", sa.Column("requests", sa.BigInteger(), nullable=False, server_default="0"))
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(_FUNCTION)
    op.execute("CREATE CONSTRAINT TRIGGER job_requests_count_change AFTER INSERT OR UPDATE OR DELETE ON "
               "job_requests DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION orch_count_change()")
    op.execute("CREATE TRIGGER job_requests_count_truncate AFTER TRUNCATE ON job_requests "
               "FOR EACH STATEMENT EXECUTE FUNCTION orch_count_change()")


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS job_requests_count_truncate ON job_requests")
        op.execute("DROP TRIGGER IF EXISTS job_requests_count_change ON job_requests")
        op.execute(_PREVIOUS)
    with op.batch_alter_table("store_changes") as batch:
        batch.drop_column("requests")
