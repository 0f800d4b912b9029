"""spend: one row per attempt, UTC day and charged $/h (day, charged_price_hr, a unique key the engine upserts on)

Before this revision the engine wrote one spend row per attempt per tick. From now on it extends the row of
(attempt, day, charged $/h) instead. Existing rows are folded the same way: an attempt's rows that lie
inside one UTC day become one row (their sum, from the first start to the last end, at their mean $/h).
A row across a midnight, or one without an attempt, is kept as it is (no day).

Revision ID: 0006_wiring
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

from orchestrator.store.types import UTCDateTime

revision: str = "0006_wiring"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SPEND = sa.table("spend", sa.column("id", sa.Integer()), sa.column("attempt_id", sa.Integer()),
                  sa.column("job_id", sa.Integer()), sa.column("from_ts", UTCDateTime()),
                  sa.column("to_ts", UTCDateTime()), sa.column("usd", sa.Float()), sa.column("day", sa.Date()),
                  sa.column("charged_price_hr", sa.Float()))


def upgrade() -> None:
    with op.batch_alter_table("spend") as batch:
        batch.add_column(sa.Column("day", sa.Date(), nullable=True))
        batch.add_column(sa.Column("charged_price_hr", sa.Float(), nullable=True))
        batch.create_unique_constraint("uq_spend_attempt_day_rate", ["attempt_id", "day", "charged_price_hr"])
    if not op.get_context().as_sql:     # offline SQL (``alembic upgrade --sql``) has no rows to fold
        _fold(op.get_bind())


def _fold(conn: sa.Connection) -> None:
    """An attempt's rows inside one UTC day become one row (see the module's docstring)."""
    groups: dict[tuple[int, object], list[tuple[int, int, datetime, datetime, float]]] = {}
    query = sa.select(_SPEND.c.id, _SPEND.c.attempt_id, _SPEND.c.job_id, _SPEND.c.from_ts, _SPEND.c.to_ts,
                      _SPEND.c.usd).where(_SPEND.c.attempt_id.is_not(None))
    for row_id, attempt_id, job_id, lo, hi, usd in conn.execute(query):
        lo, hi = lo.astimezone(UTC), hi.astimezone(UTC)
        midnight = datetime(lo.year, lo.month, lo.day, tzinfo=UTC) + timedelta(days=1)
        if hi <= midnight:
            groups.setdefault((attempt_id, lo.date()), []).append((row_id, job_id, lo, hi, float(usd)))
    for (attempt_id, day), rows in groups.items():
        lo, hi = min(r[2] for r in rows), max(r[3] for r in rows)
        usd = sum(r[4] for r in rows)
        seconds = (hi - lo).total_seconds()
        rate = round(usd * 3600 / seconds, 6) if seconds > 0 else None
        conn.execute(sa.delete(_SPEND).where(_SPEND.c.id.in_([r[0] for r in rows])))
        conn.execute(sa.insert(_SPEND).values(attempt_id=attempt_id, job_id=rows[0][1], from_ts=lo, to_ts=hi,
                                              usd=usd, day=day, charged_price_hr=rate))


def downgrade() -> None:
    with op.batch_alter_table("spend") as batch:
        batch.drop_constraint("uq_spend_attempt_day_rate", type_="unique")
        batch.drop_column("charged_price_hr")
        batch.drop_column("day")
