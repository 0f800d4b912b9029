"""The spend step: charge each machine's time to its job, up to this tick, from the last recorded mark.

Runs first among the active steps, so budget and recovery decisions this tick see the money spent so far.
A machine is charged while the cloud lists it running under a live attempt, and once more when the sync
ends its attempt (reclaimed, lost, confirmed gone). The marks are kept in memory and, across restarts, in
the store (``spend_mark``: the last stored interval end), so no interval is charged twice.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.facts import HOLDING_STATES, Observed, TickFacts
from orchestrator.engine.ports import AttemptRecord, EngineStore
from orchestrator.spend import accrued_usd


class SpendStep:
    def __init__(self) -> None:
        self._marks: dict[int, datetime] = {}

    def run(self, deps: EngineDeps, facts: TickFacts) -> None:
        for seen in facts.observed:
            if _billable(seen):
                self.accrue(deps.store, seen.attempt, facts.now)

    def accrue(self, store: EngineStore, attempt: AttemptRecord, now: datetime) -> None:
        since = self._marks.get(attempt.id) or store.spend_mark(attempt.id) or attempt.started_at or attempt.created_at
        if since is None or now <= since:
            self._marks[attempt.id] = now
            return
        usd = accrued_usd(attempt.offer.price_hr, since, now)
        if usd > 0:
            store.add_spend(attempt.job_id, attempt.id, usd, since, now)
        self._marks[attempt.id] = now


def _billable(seen: Observed) -> bool:
    return seen.ended_by_sync or (seen.before in HOLDING_STATES and seen.machine_running)
