"""The SQL engine store's reads of attempts, each an ``AttemptRecord``: the attempt's plain columns joined with
its instance row (orchestrator/store/queries.py), its offer from the catalog's rows (stored_offers.py).

The live and the draining attempts are kept reads (sqlstore_reads.py), of this daemon's jobs only. Every
daemon's live launch ids (the sweep's: nobody mistakes another's machine for an orphan) are kept on PostgreSQL
under their own token (change_tokens.py), digested again only when the server's count of attempt writers
moved (changes.py). Mixed into ``SqlEngineStore``; each read is its own transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from sqlmodel import Session

from orchestrator.engine.ports import AttemptRecord
from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.store import change_tokens, queries
from orchestrator.store import sqlstore_reads as reads
from orchestrator.store.changes import ATTEMPTS
from orchestrator.store.queries import AttemptColumns
from orchestrator.store.sqlstore_reads import KeptReads
from orchestrator.store.stored_offers import OfferBook
from providers.base import Offer


class AttemptReads(KeptReads):
    _offers: OfferBook
    #: PostgreSQL: every daemon's live launch ids, and the live attempts' token they were read under.
    _live_ids: tuple[object, set[str]] | None

    def _mine(self, job_id: int) -> bool:
        """Whether this daemon holds ``job_id`` (``SqlEngineStore._mine``)."""
        raise NotImplementedError

    def _record(self, r: AttemptColumns, offer: Offer | None = None) -> AttemptRecord:
        return AttemptRecord(id=r.id, job_id=r.job_id, launch_id=r.launch_id, state=AttemptState(r.state),
                             offer=offer or self._offers.of(r), instance_id=r.instance_id, created_at=r.created_at,
                             started_at=r.started_at, ended_at=r.ended_at, checkpoint_restored=r.checkpoint_restored,
                             reason=r.reason, node_rank=r.node_rank, generation=r.generation,
                             end_cause=EndCause(r.end_cause) if r.end_cause else None, drain_until=r.drain_until,
                             launch_price_hr=r.price_hr, actual_price_hr=r.actual_price_hr,
                             heard_at=r.heard_at, unreachable_since=r.unreachable_since, heard_beat=r.heard_beat)

    def _attempts(self, read: Callable[[Session], list[AttemptColumns]]) -> list[AttemptRecord]:
        with self.store.transaction() as tx:
            rows = read(tx)
        return [self._record(r) for r in rows]

    def live_attempts(self) -> Sequence[AttemptRecord]:
        def load(tx: Session) -> list[AttemptRecord]:
            found = queries.live_attempt_columns(tx, self._leased_to)
            return [self._record(r) for r in found if self._mine(r.job_id)]

        return list(self._cached(reads.LIVE_ATTEMPTS, load))

    def draining_attempts(self, now: datetime) -> Sequence[AttemptRecord]:
        # Kept as the live attempts are (every tick asked again for the same few rows, or none): the attempts
        # draining after the read's time, narrowed to ``now`` here; read again if the clock went back.
        def load(tx: Session) -> tuple[datetime, list[AttemptRecord]]:
            return now, [self._record(r) for r in queries.draining_attempt_columns(tx, now, self._leased_to)]

        read_at, found = self._cached(reads.DRAINING, load)
        if now < read_at:
            self._reads.pop(reads.DRAINING, None)
            read_at, found = self._cached(reads.DRAINING, load)
        return [a for a in found if self._mine(a.job_id) and a.drain_until is not None and a.drain_until > now]

    def all_live_launch_ids(self) -> set[str]:
        if self.store.dialect != "postgresql":
            return set(self._cached(reads.LIVE_LAUNCH_IDS, queries.live_launch_ids))
        # Every daemon's: the jobs' token does not cover them. Their own token (read first: a commit after it
        # changes the next one) tells whether the kept set still holds; it is digested again only when the
        # server's count of attempt writers moved (orchestrator/store/changes.py), so a steady tick reads one row.
        with self.store.transaction() as tx:
            token = self._counted.get(tx, "live attempts", ATTEMPTS, lambda: change_tokens.live_attempts_token(tx))
            if self._live_ids is None or self._live_ids[0] != token:
                self._live_ids = (token, queries.live_launch_ids(tx))
        return set(self._live_ids[1])

    def attempts_for_job(self, job_id: int) -> Sequence[AttemptRecord]:
        return self._attempts(lambda tx: queries.job_attempt_columns(tx, job_id))

    def attempt_by_launch_id(self, launch_id: str) -> AttemptRecord | None:
        found = self._attempts(lambda tx: queries.attempt_columns_by_launch_ids(tx, [launch_id]))
        return found[0] if found else None

    def attempts_by_launch_ids(self, launch_ids: Sequence[str]) -> dict[str, AttemptRecord]:
        found = self._attempts(lambda tx: queries.attempt_columns_by_launch_ids(tx, launch_ids))
        return {a.launch_id: a for a in found}

    def wanted_jobs(self, job_ids: Sequence[int]) -> set[int]:
        if not job_ids:
            return set()
        with self.store.transaction() as tx:
            return queries.active_job_ids(tx, job_ids)
