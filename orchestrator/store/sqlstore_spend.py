"""The SQL engine store's spend buffer: charges are kept in memory, folded per ledger row (attempt, UTC day,
rate), and written in one transaction (an upsert per row, orchestrator/store/spend_ledger.py).

What is written when:

* ``flush()``: the engine's unsettled meters (``settle_before_reads``), then every buffered row. Before any
  read of spend from the store (budgets, a job's total) and when the service closes, so what this process
  reads is exact to the tick.
* ``flush_due(now)``, at the start of every tick: only the rows that are due. A live attempt's row is due once
  per ``SPEND_WRITE_EVERY``, at a phase of its own (so at 10k machines a tick writes a slice of the rows, not
  all of them: the upsert of every row every tick was ~0.4 s of CPU); the engine's spend meters charge a
  steady machine at that same phase (``orchestrator.engine.spend.spend_phase``), so its charge crosses the
  phase as it arrives. A row is due at once when its attempt ended (nobody charges an ended attempt again)
  or when the attempt charges a new day or rate (the older row is complete). Only rows charged since the
  last call are looked at.

The store's ledger therefore lags a live attempt by at most ``SPEND_WRITE_EVERY`` (other processes, the
console, see it so); this process's own reads flush first. A process killed before a write loses no money:
the next one continues from ``spend_mark`` (the last STORED interval end) and accrues the lost interval
again. Only an attempt that ended in the tick before the kill loses its last charge, as it did when every
row was written each tick. Mixed into ``SqlEngineStore``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime

from sqlmodel import Session

from orchestrator.engine.spend import SPEND_WRITE_EVERY, spend_phase
from orchestrator.store import change_tokens, queries
from orchestrator.store.change_tokens import ChangeToken
from orchestrator.store.db import Store
from orchestrator.store.spend_ledger import SpendCharge, upsert_spend
from orchestrator.store.sqlstore_reads import LIVE_ATTEMPTS, Kept, ReadKey

_PERIOD_S = SPEND_WRITE_EVERY.total_seconds()

RowKey = tuple[int, date, float]        # attempt id, UTC day, charged $/h: one ledger row


def _crossed(row: SpendCharge) -> bool:
    """The row's buffered interval reaches its attempt's write phase (the one the engine settles it at)."""
    shift = spend_phase(row.attempt_id)
    return (row.to_ts.timestamp() + shift) // _PERIOD_S > (row.from_ts.timestamp() + shift) // _PERIOD_S


class SpendBuffer:
    store: Store
    #: Buffered charges, one folded row per ledger key.
    _pending: dict[RowKey, SpendCharge]
    #: Attempts whose buffered rows are written at the next tick's start (ended; or a new day or rate).
    _due: set[int]
    #: Each attempt's newest buffered row.
    _latest: dict[int, RowKey]
    #: Rows charged since the last ``flush_due`` (only they can have crossed their phase since).
    _touched: set[RowKey]
    #: Attempts' spend marks (up to when their spend is stored), read ahead in chunks and kept while this
    #: store holds the attempt's job (only the holder accrues; a job no daemon holds is charged by any, each
    #: write cut at the stored mark read under its row lock: ``_unheld_rows``).
    _marks: dict[int, datetime | None]
    #: Each job's total spend, buffered charges included (``add_spend`` keeps it up to date).
    _spent: dict[int, float]
    _moved: set[int]
    _reads: dict[ReadKey, Kept]
    #: The engine's settling of its spend meters (``EngineStore.settle_before_reads``), None: none.
    _settle: Callable[[], None] | None
    wrote_aside: Callable[[ChangeToken | None, ChangeToken | None], None]     # KeptReads'

    def _fence(self, tx: Session, job_id: int | None) -> None:
        raise NotImplementedError

    def _mine(self, job_id: int) -> bool:
        raise NotImplementedError

    def _unheld(self, tx: Session, job_ids: list[int]) -> list[int]:
        """Of ``job_ids`` (none this daemon holds), those no live daemon holds, locked until ``tx`` ends."""
        raise NotImplementedError

    def settle_before_reads(self, settle: Callable[[], None]) -> None:
        self._settle = settle

    def flush(self) -> None:
        """Write every buffered row (one transaction; each extends its attempt's row for the day and rate), the
        engine's unsettled charges first."""
        if self._settle is not None:
            self._settle()
        self._write(list(self._pending))

    def flush_due(self) -> None:
        """Write the buffered rows that are due (see the module's docstring); keep the others. Only the rows
        charged since the last call are looked at: a row not crossed then, and not extended since, is not now."""
        touched, self._touched = self._touched, set()
        self._write([k for k in touched if k in self._pending
                     and (self._pending[k].attempt_id in self._due or _crossed(self._pending[k]))]
                    + ([k for k in self._pending if k not in touched and k[0] in self._due] if self._due else []))

    def drop_buffer(self) -> None:
        """Forget what is buffered (accrued under a lapsed lease: the holder charges it from the stored mark)."""
        self._pending.clear()
        self._touched.clear()
        self._due.clear()
        self._latest.clear()
        self._marks.clear()
        self._spent.clear()

    def _write(self, keys: list[RowKey]) -> None:
        if not keys:
            return
        rows = [self._pending.pop(k) for k in keys]
        for key in keys:
            if self._latest.get(key[0]) == key:
                del self._latest[key[0]]
        self._due.difference_update({r.attempt_id for r in rows})
        with self.store.transaction() as tx:
            self._fence(tx, None)       # jobs leave this daemon only by its own release or its reaping
            others = [r for r in rows if not self._mine(r.job_id)]
            rows = [r for r in rows if self._mine(r.job_id)] + (self._unheld_rows(tx, others) if others else [])
            if not rows:
                return
            before = change_tokens.change_token(tx)
            upsert_spend(tx, rows)
            after = change_tokens.change_token(tx)    # holding the write lock: nobody commits before this does
        self.wrote_aside(before, after)

    def _unheld_rows(self, tx: Session, rows: list[SpendCharge]) -> list[SpendCharge]:
        """Of charges for jobs this daemon does not hold, those to write: a job another live daemon holds is
        charged by it (dropped here); a job no daemon holds (a finished one whose machine the cloud still
        bills: it needs no driver, so nobody claims it) is charged by any daemon that sees the machine, each
        charge cut to what is after the stored mark, read under the job's row lock, so it counts once. A charge
        that starts after the stored mark on the same UTC day is extended back to it: the interval between was
        dropped here while the job still had a holder (one lapsed, not yet reaped), and nobody else charges it
        (an ended attempt's machine is charged from its last mark on, as ``SpendStep.charge_stragglers`` does)."""
        free = set(self._unheld(tx, sorted({r.job_id for r in rows})))
        rows = [r for r in rows if r.job_id in free]
        if not rows:
            return []
        marks = queries.spend_marks(tx, sorted({r.attempt_id for r in rows}))
        out: list[SpendCharge] = []
        for r in sorted(rows, key=lambda r: r.from_ts):
            mark = marks.get(r.attempt_id)
            if mark is not None and mark.tzinfo is None:
                mark = mark.replace(tzinfo=r.from_ts.tzinfo)
            if mark is not None and r.to_ts <= mark:
                continue                # another daemon charged it already
            if mark is not None and mark != r.from_ts and (mark > r.from_ts or mark.astimezone(UTC).date() == r.day):
                r = r._replace(from_ts=mark, usd=r.usd * (r.to_ts - mark) / (r.to_ts - r.from_ts))
            out.append(r)
            marks[r.attempt_id] = r.to_ts
        for attempt_id, mark in marks.items():
            self._marks[attempt_id] = mark
        return out

    def pending_spend(self, job_ids: set[int]) -> dict[int, float]:
        """Buffered (not yet written) charges of ``job_ids``, per job."""
        out: dict[int, float] = {}
        for row in self._pending.values():
            if row.job_id in job_ids:
                out[row.job_id] = out.get(row.job_id, 0.0) + row.usd
        return out

    def spend_mark(self, attempt_id: int) -> datetime | None:
        """The stored mark, or the buffered rows' (``add_spend`` moves it)."""
        if attempt_id not in self._marks:
            # Read ahead: this attempt and every kept live one not read yet, a grouped query per chunk, in one
            # transaction (a restart asks for every live attempt's: chunk by chunk, the kept list was scanned
            # again for each chunk).
            live = self._reads.get(LIVE_ATTEMPTS)
            wanted = {attempt_id, *(a.id for a in (live.value if live else ()) if a.id not in self._marks)}
            with self.store.transaction() as tx:
                self._marks.update(queries.spend_marks(tx, sorted(wanted)))
        return self._marks[attempt_id]

    def add_spend(self, job_id: int, attempt_id: int, usd: float, since: datetime, until: datetime, *,
                  price_hr: float) -> None:
        """Buffered (see the module's docstring): written by a later ``flush_due``, or ``flush`` before any
        read of spend.

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
        self._buffer(SpendCharge(job_id, attempt_id, since, until, usd, price_hr))

    def _buffer(self, charge: SpendCharge) -> None:
        key = (charge.attempt_id, charge.day, charge.charged_price_hr)
        self._touched.add(key)
        prev = self._pending.get(key)
        if prev is None:
            if self._latest.get(charge.attempt_id, key) != key:
                self._due.add(charge.attempt_id)      # a new day or rate: the older row is complete
            self._pending[key] = charge
            self._latest[charge.attempt_id] = key
        else:
            self._pending[key] = prev._replace(from_ts=min(prev.from_ts, charge.from_ts),
                                               to_ts=max(prev.to_ts, charge.to_ts), usd=prev.usd + charge.usd)
        if charge.job_id in self._spent:
            self._spent[charge.job_id] += charge.usd
            self._moved.add(charge.job_id)

    def attempt_ended(self, attempt_id: int) -> None:
        """Its buffered rows (and the last charge the spend step makes after its end) go at the next tick."""
        self._due.add(attempt_id)
