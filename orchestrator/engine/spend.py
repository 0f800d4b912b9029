"""The spend step: charge each machine's time to its job, up to this tick, from the last recorded mark.

Runs first among the active steps, so budget and recovery decisions this tick see the money spent so far.
A machine is charged while the cloud lists it billing under a live attempt (running, or UNREACHABLE: the
cloud lost contact but still bills it), and once more when the sync ends its attempt (reclaimed, lost,
confirmed gone). The marks are kept in memory and, across restarts, in the store (``spend_mark``: the last
stored interval end), so no interval is charged twice.

The rate is what the cloud charges where it says (the instance's reported $/h this tick, else the one
recorded for it, e.g. the zone's spot price or the refreshed catalog's price at launch), else the quote the
machine was launched at. Charges are cut at UTC midnights: the store keeps one ledger row per attempt, day
and rate and extends it (orchestrator/store/spend_ledger.py), so the ledger grows with attempts, not ticks.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.facts import HOLDING_STATES, Observed, TickFacts
from orchestrator.engine.ports import AttemptRecord, EngineStore
from orchestrator.engine.values import split_at_midnights
from orchestrator.money.spend import accrued_usd, charged_price_hr, reported_price_hr
from providers.base import InstanceState

#: Instance states the spend step charges for (UNREACHABLE: not gone, and still billed).
BILLING_STATES = frozenset({InstanceState.RUNNING, InstanceState.UNREACHABLE})


class SpendStep:
    def __init__(self) -> None:
        self._marks: dict[int, datetime] = {}
        self._reported: dict[int, float] = {}      # the last $/h a cloud reported per attempt, this process

    def run(self, deps: EngineDeps, facts: TickFacts) -> dict[int, float]:
        """Charge the tick; returns the $ charged per job (the facts' totals were read before)."""
        charged: dict[int, float] = {}
        for seen in facts.observed:
            if _billable(seen):
                usd = self.accrue(deps.store, seen.attempt, self.rate(seen), facts.now)
                charged[seen.attempt.job_id] = charged.get(seen.attempt.job_id, 0.0) + usd
        return charged

    def rate(self, seen: Observed) -> float:
        """The $/h to charge ``seen``'s machine at (see the module's docstring)."""
        a = seen.attempt
        reported = reported_price_hr(seen.instance.price_hr) if seen.instance is not None else None
        if reported is not None:
            self._reported[a.id] = reported
        actual = reported if reported is not None else self._reported.get(a.id, a.actual_price_hr)
        quoted = a.launch_price_hr if a.launch_price_hr is not None else a.offer.price_hr
        return charged_price_hr(actual, quoted)

    def accrue(self, store: EngineStore, attempt: AttemptRecord, price_hr: float, now: datetime) -> float:
        """Charge ``attempt`` up to ``now``; returns the $ charged."""
        since = self._marks.get(attempt.id) or store.spend_mark(attempt.id) or attempt.started_at or attempt.created_at
        self._marks[attempt.id] = now
        if since is None or now <= since:
            return 0.0
        total = 0.0
        for lo, hi in split_at_midnights(since, now):
            usd = accrued_usd(price_hr, lo, hi)
            if usd > 0:
                store.add_spend(attempt.job_id, attempt.id, usd, lo, hi, price_hr=price_hr)
                total += usd
        if attempt.state.is_final:
            self._reported.pop(attempt.id, None)
        return total


def _billable(seen: Observed) -> bool:
    return seen.ended_by_sync or (seen.before in HOLDING_STATES and seen.instance is not None
                                  and seen.instance.state in BILLING_STATES)
