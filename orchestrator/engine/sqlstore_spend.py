"""The SQL engine store's spend buffer: charges are kept in memory and written in one transaction (``flush``:
an upsert per ledger row, orchestrator/store/spend_ledger.py) before any read of spend and at the start of
every tick. A process killed before a flush loses no money: the next one continues from ``spend_mark`` (the
last STORED interval end) and accrues the lost interval again. Mixed into ``SqlEngineStore``."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from orchestrator.store import queries
from orchestrator.store.db import Store
from orchestrator.store.spend_ledger import SpendCharge, upsert_spend


class SpendBuffer:
    store: Store
    _pending_spend: list[SpendCharge]
    #: Attempts' spend marks (up to when their spend is stored), read ahead in chunks and kept while this
    #: store holds the attempt's job (only the holder accrues).
    _marks: dict[int, datetime | None]
    #: Each job's total spend, kept up to date by ``flush``.
    _spent: dict[int, float]
    _reads: dict[str, tuple[int, object]]

    def _fence(self, tx: Session, job_id: int | None) -> None:
        raise NotImplementedError

    def _mine(self, job_id: int) -> bool:
        raise NotImplementedError

    def flush(self) -> None:
        """Write the buffered charges (one transaction; each extends its attempt's row for the day and rate)."""
        if not self._pending_spend:
            return
        rows, self._pending_spend = self._pending_spend, []
        with self.store.transaction() as tx:
            self._fence(tx, None)       # jobs leave this daemon only by its own release or its reaping
            rows = [r for r in rows if self._mine(r.job_id)]
            if rows:
                upsert_spend(tx, rows)
        for row in rows:
            if row.job_id in self._spent:
                self._spent[row.job_id] += row.usd

    def spend_mark(self, attempt_id: int) -> datetime | None:
        """The stored mark, or the buffered rows' (``add_spend`` moves it)."""
        if attempt_id not in self._marks:
            # Read ahead: this attempt and the next live ones not read yet, in one grouped query.
            live = self._reads.get("live")
            ahead = [a.id for a in (live[1] if live else ()) if a.id not in self._marks]  # type: ignore[attr-defined]
            wanted = [attempt_id, *[i for i in ahead if i != attempt_id][:queries.CHUNK - 1]]
            with self.store.transaction() as tx:
                self._marks.update(queries.spend_marks(tx, wanted))
        return self._marks[attempt_id]

    def add_spend(self, job_id: int, attempt_id: int, usd: float, since: datetime, until: datetime, *,
                  price_hr: float) -> None:
        """Buffered (see "steady ticks"): written by the next ``flush``, before any read of spend.

        Charges of one attempt never overlap and leave no gap: the interval starts at the stored mark (the rate
        kept), so a job that came back to this daemon after another charged it is not charged twice."""
        if until < since or usd < 0:
            raise ValueError("spend must be a non-negative amount over a forward interval")
        mark = self.spend_mark(attempt_id)
        if mark is not None and mark != since and until > since:
            if until <= mark:
                return
            usd, since = usd * (until - mark) / (until - since), mark
        self._marks[attempt_id] = until
        self._pending_spend.append(SpendCharge(job_id, attempt_id, since, until, usd, price_hr))
