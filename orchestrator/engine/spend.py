"""The spend step: charge each machine's time to its job, from the last recorded mark.

Runs first among the active steps, so budget and recovery decisions this tick see the money spent so far.
A machine is charged while the cloud lists it billing under a live attempt (``Instance.bills``: running, or
UNREACHABLE: the cloud lost contact but still bills it, or a state its provider says it bills in, such as an Azure
VM starting or stopped but still allocated), and once more when the sync ends its attempt (reclaimed, lost,
confirmed gone). A machine the cloud still lists billing after its attempt ended (a drain, a terminate refused
or still in progress) is charged too, from the sweep's stragglers (``charge_stragglers``). The marks are kept
in memory and, across restarts, in the store (``spend_mark``: the last stored interval end), so no interval is
charged twice.

The rate is what the cloud charges where it says (the instance's reported $/h this tick, else the one
recorded for it, e.g. the zone's spot price or the refreshed catalog's price at launch), else the quote the
machine was launched at. Charges are cut at UTC midnights: the store keeps one ledger row per attempt, day
and rate and extends it (orchestrator/store/spend_ledger.py), so the ledger grows with attempts, not ticks.

A steady tick costs what changed: a billing machine is a meter (its rate, charged up to its mark), and an
attempt the sync handed on unchanged (``TickFacts.changed``) keeps running at the same rate, so nothing is
charged for it that tick; its meter is settled (charged up to now, as the ticks in between would have) when:

* its attempt is observed afresh (a new record, machine or report: the rate or the billing may change);
* it leaves the facts (ended, or its cloud did not answer): up to the last tick it was billing, as before;
* its phase in ``SPEND_WRITE_EVERY`` comes (spread over the period per attempt), so the ledger lags a live
  machine by at most that;
* every tick where money is promised on it: a job with its own ``budget_usd`` or a ``deadline`` (the job
  budget step and the recovery policy read its spend), and every meter when the config has ``budgets:``
  (their review and the launch gate read the ledger); so each of these reads is exact to the tick.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.facts import HOLDING_STATES, Observed, TickFacts
from orchestrator.engine.ports import AttemptRecord, EngineStore, JobRecord
from orchestrator.engine.values import split_at_midnights
from orchestrator.money.spend import accrued_usd, charged_price_hr, reported_price_hr
from providers.base import Instance

#: The longest a live machine's charge waits, unsettled in memory or buffered by the store, before it is written.
SPEND_WRITE_EVERY = timedelta(minutes=5)
_PERIOD_S = SPEND_WRITE_EVERY.total_seconds()


def spend_phase(attempt_id: int) -> float:
    """Seconds into each ``SPEND_WRITE_EVERY`` at which an attempt's charge is settled and written (consecutive
    ids spread over the period: Knuth's multiplicative hash)."""
    return (attempt_id * 2654435761) % 2**32 / 2**32 * _PERIOD_S


def _next_phase(attempt_id: int, after: datetime) -> float:
    """The first of the attempt's phase instants after ``after`` (a POSIX timestamp)."""
    shift = spend_phase(attempt_id)
    return ((after.timestamp() + shift) // _PERIOD_S + 1) * _PERIOD_S - shift


@dataclass(slots=True)
class _Meter:
    job_id: int
    rate: float
    since: datetime         # charged up to here
    due: float              # settled at this POSIX time at the latest (its phase)
    exact: bool             # settled every tick (money is promised on its job: see the module's docstring)


def _exact(job: JobRecord) -> bool:
    return job.spec.budget_usd is not None or job.spec.deadline is not None


class SpendStep:
    def __init__(self) -> None:
        self._marks: dict[int, datetime] = {}
        self._reported: dict[int, float] = {}      # the last $/h a cloud reported per attempt, this process
        self._meters: dict[int, _Meter] = {}
        self._phases: list[tuple[float, int]] = []  # (due, attempt id), a heap; stale entries are skipped
        self._last: datetime | None = None          # the last tick: every open meter billed up to it

    def run(self, deps: EngineDeps, facts: TickFacts) -> dict[int, float]:
        """Charge the tick; returns the $ settled per job this tick (the facts' totals were read before), exact
        for every job money is promised on."""
        store, now, last = deps.store, facts.now, self._last
        charged: dict[int, float] = {}
        changed = facts.changed
        seen_ids = {o.attempt.id for o in facts.observed}
        for attempt_id in [k for k in self._meters if k not in seen_ids]:    # left: billed up to the last tick
            self._settle(store, charged, attempt_id, last, close=True)
        for seen in facts.observed:
            a = seen.attempt
            if changed is not None and a.id not in changed:
                continue        # unchanged: billing (or not) as last tick, at the same rate
            if a.id in self._meters:        # its rate up to the last tick; from there on, this tick's
                self._settle(store, charged, a.id, last, close=True)
            if _billable(seen):
                self._open(store, seen, self.rate(seen), now)
                self._settle(store, charged, a.id, now, close=a.state.is_final)
            if a.state.is_final:
                self._reported.pop(a.id, None)
        if deps.config.budgets:
            for attempt_id in list(self._meters):
                self._settle(store, charged, attempt_id, now)
        else:
            for attempt_id in [k for k, m in self._meters.items() if m.exact]:
                self._settle(store, charged, attempt_id, now)
        while self._phases and self._phases[0][0] <= now.timestamp():
            due, attempt_id = heapq.heappop(self._phases)
            meter = self._meters.get(attempt_id)
            if meter is not None and meter.due == due:
                self._settle(store, charged, attempt_id, now)
        self._last = now
        return charged

    def settle(self, store: EngineStore) -> None:
        """Charge every open meter up to the last tick (the service closing: its store then writes them)."""
        if self._last is not None:
            for attempt_id in list(self._meters):
                self._settle(store, {}, attempt_id, self._last)

    def charge_stragglers(self, store: EngineStore, stragglers: Sequence[tuple[Instance, AttemptRecord]],
                          now: datetime) -> None:
        """Charge machines the cloud still lists billing under an ENDED attempt (a notice's or a stop's drain, a
        terminate the cloud refused or has not carried out yet: the sweep's stragglers) from their mark up to
        now, at the rate they bill: an attempt ends in the store before its machine does in the cloud, and the
        cloud bills until then. Their meter closed when the attempt left the facts; this goes on from there."""
        for inst, a in stragglers:
            if a.id in self._meters:        # ended this tick: its meter charges up to now, once, and closes
                self._settle(store, {}, a.id, now, close=True)
                continue
            since = self._marks.get(a.id) or store.spend_mark(a.id) or a.ended_at or a.created_at
            if since is None or now <= since:
                continue
            actual = reported_price_hr(inst.price_hr)
            if actual is None:
                actual = self._reported.get(a.id, a.actual_price_hr)
            rate = charged_price_hr(actual, a.launch_price_hr if a.launch_price_hr is not None else a.offer.price_hr)
            self.accrue(store, a, rate, since, now)
            self._marks[a.id] = now

    def rate(self, seen: Observed) -> float:
        """The $/h to charge ``seen``'s machine at (see the module's docstring)."""
        a = seen.attempt
        reported = reported_price_hr(seen.instance.price_hr) if seen.instance is not None else None
        if reported is not None:
            self._reported[a.id] = reported
        actual = reported if reported is not None else self._reported.get(a.id, a.actual_price_hr)
        quoted = a.launch_price_hr if a.launch_price_hr is not None else a.offer.price_hr
        return charged_price_hr(actual, quoted)

    def _open(self, store: EngineStore, seen: Observed, rate: float, now: datetime) -> None:
        a = seen.attempt
        since = self._marks.get(a.id) or store.spend_mark(a.id) or a.started_at or a.created_at or now
        meter = _Meter(a.job_id, rate, since, _next_phase(a.id, since), _exact(seen.job))
        self._meters[a.id] = meter
        heapq.heappush(self._phases, (meter.due, a.id))

    def _settle(self, store: EngineStore, charged: dict[int, float], attempt_id: int, until: datetime | None, *,
                close: bool = False) -> None:
        """Charge the meter up to ``until`` at its rate; ``close``: and take it away."""
        meter = self._meters.pop(attempt_id) if close else self._meters.get(attempt_id)
        if meter is None or until is None:
            return
        if until > meter.since:
            usd = self.accrue(store, _Charged(attempt_id, meter.job_id), meter.rate, meter.since, until)
            charged[meter.job_id] = charged.get(meter.job_id, 0.0) + usd
            meter.since = until
        self._marks[attempt_id] = meter.since
        if not close and meter.due <= until.timestamp():
            meter.due = _next_phase(attempt_id, until)
            heapq.heappush(self._phases, (meter.due, attempt_id))

    def accrue(self, store: EngineStore, attempt: AttemptRecord | _Charged, price_hr: float, since: datetime,
               now: datetime) -> float:
        """Charge ``attempt`` for ``[since, now)`` at ``price_hr`` (cut at UTC midnights); returns the $ charged."""
        total = 0.0
        for lo, hi in split_at_midnights(since, now):
            usd = accrued_usd(price_hr, lo, hi)
            if usd > 0:
                store.add_spend(attempt.job_id, attempt.id, usd, lo, hi, price_hr=price_hr)
                total += usd
        return total


@dataclass(frozen=True, slots=True)
class _Charged:
    id: int
    job_id: int


def _billable(seen: Observed) -> bool:
    return seen.ended_by_sync or (seen.before in HOLDING_STATES and seen.instance is not None
                                  and seen.instance.bills)
