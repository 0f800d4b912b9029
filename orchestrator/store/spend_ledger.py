"""Writing the spend ledger: one row per attempt, UTC day and charged $/h, extended in place (an upsert).

The engine charges each machine every tick. Writing one row per charge made the ledger grow with ticks
(a month of 30 s ticks is ~86,000 rows per machine); here a charge extends the row of its
``(attempt_id, day, charged_price_hr)`` key instead (``uq_spend_attempt_day_rate``), so an attempt has one
row per UTC day and price. A charge never straddles a midnight (``engine.values.split_at_midnights``), so
a row is always inside its day and the rollup's readers (orchestrator/store/rollup.py) stay exact per day and per month.

A row covers ``[from_ts, to_ts)``: the first charge's start to the last charge's end. Charges of one attempt
follow each other (each starts at the previous one's end, ``spend_mark``), so a row's interval is covered
without gaps at its one rate.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime
from typing import NamedTuple

import sqlalchemy as sa
from sqlmodel import Session

from orchestrator.store.models import Spend

_KEY = ("attempt_id", "day", "charged_price_hr")


class SpendCharge(NamedTuple):
    """Money one attempt cost over ``[from_ts, to_ts)`` at ``charged_price_hr``, inside one UTC day."""

    job_id: int
    attempt_id: int
    from_ts: datetime
    to_ts: datetime
    usd: float
    charged_price_hr: float

    @property
    def day(self) -> date:
        return self.from_ts.astimezone(UTC).date()


def fold(charges: Sequence[SpendCharge]) -> list[SpendCharge]:
    """Charges of one key joined into one (a buffer of several ticks becomes one write per row)."""
    out: dict[tuple[int, date, float], SpendCharge] = {}
    for c in charges:
        key = (c.attempt_id, c.day, c.charged_price_hr)
        prev = out.get(key)
        out[key] = c if prev is None else prev._replace(from_ts=min(prev.from_ts, c.from_ts),
                                                        to_ts=max(prev.to_ts, c.to_ts), usd=prev.usd + c.usd)
    return list(out.values())


def _insert(dialect: str):  # type: ignore[no-untyped-def]
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(Spend)


def upsert_spend(tx: Session, charges: Sequence[SpendCharge]) -> None:
    """Add ``charges`` to their rows (created where missing), in one statement per distinct row."""
    rows = fold(charges)
    if not rows:
        return
    if tx.get_bind().dialect.name == "postgresql":
        _upsert_arrays(tx, rows)
        return
    stmt = _insert(tx.get_bind().dialect.name)
    table = Spend.__table__  # type: ignore[attr-defined]
    new = stmt.excluded
    stmt = stmt.on_conflict_do_update(index_elements=list(_KEY), set_={
        "usd": table.c.usd + new.usd,
        "from_ts": sa.case((new.from_ts < table.c.from_ts, new.from_ts), else_=table.c.from_ts),
        "to_ts": sa.case((new.to_ts > table.c.to_ts, new.to_ts), else_=table.c.to_ts),
    })
    tx.execute(stmt, [{"job_id": r.job_id, "attempt_id": r.attempt_id, "from_ts": r.from_ts, "to_ts": r.to_ts,
                       "usd": r.usd, "day": r.day, "charged_price_hr": r.charged_price_hr} for r in rows])


#: PostgreSQL: the whole buffer as one statement over column arrays (``unnest``), not one execution per row
#: (a tick at 10k machines extends 10k rows). ``fold`` made the keys unique, as ON CONFLICT needs. The arrays
#: travel as array literals (text the server casts): psycopg's per-element dumping cost more than the insert.
_UPSERT_ARRAYS = sa.text(
    "INSERT INTO spend (job_id, attempt_id, from_ts, to_ts, usd, day, charged_price_hr) "
    "SELECT * FROM unnest(CAST(:job_id AS integer[]), CAST(:attempt_id AS integer[]), "
    "CAST(:from_ts AS timestamptz[]), CAST(:to_ts AS timestamptz[]), CAST(:usd AS double precision[]), "
    "CAST(:day AS date[]), CAST(:rate AS double precision[])) "
    "ON CONFLICT (attempt_id, day, charged_price_hr) DO UPDATE SET usd = spend.usd + excluded.usd, "
    "from_ts = LEAST(spend.from_ts, excluded.from_ts), to_ts = GREATEST(spend.to_ts, excluded.to_ts)")


def _array(values: Iterator[object]) -> str:
    """A PostgreSQL array literal of ints, floats (``repr``: the shortest text that reads back the same
    double), dates or aware datetimes (ISO 8601 with offset, quoted)."""
    return "{" + ",".join(f'"{v}"' if isinstance(v, date) else repr(v) for v in values) + "}"


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("naive datetime given to the store; pass an aware (UTC) datetime")
    return value


def _upsert_arrays(tx: Session, rows: Sequence[SpendCharge]) -> None:
    tx.execute(_UPSERT_ARRAYS, {
        "job_id": _array(int(r.job_id) for r in rows), "attempt_id": _array(int(r.attempt_id) for r in rows),
        "from_ts": _array(_aware(r.from_ts) for r in rows), "to_ts": _array(_aware(r.to_ts) for r in rows),
        "usd": _array(float(r.usd) for r in rows), "day": _array(r.day for r in rows),
        "rate": _array(float(r.charged_price_hr) for r in rows)})


def spend_row_count(tx: Session) -> int:
    """How many rows the ledger holds (what the rollup keeps small)."""
    return int(tx.exec(sa.select(sa.func.count()).select_from(Spend)).one()[0])  # type: ignore[call-overload]
