"""The SQL engine store's side tables: budgets (the spend rollup, threshold events), the web console's
(GPU utilization, relaunch requests) and the fleet's spot history (the recovery policy's). Mixed into
``SqlEngineStore``; each method is its own transaction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlmodel import Session

from orchestrator.engine.ports import AttemptRecord, FleetSpotRun
from orchestrator.engine.recovery_policy import SpotRun
from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.engine.values import GpuUtilSample, RelaunchRequest
from orchestrator.money.budget_launch import BudgetVerdict, RefusedLimits
from orchestrator.money.budgets import Budget, BudgetLedger, BudgetReview
from orchestrator.store import budget_watch, gpu_util, queries, repo, requests, spot_history
from orchestrator.store.changes import REQUESTS, Counted
from orchestrator.store.db import Store
from orchestrator.store.fleet_member import FleetMember
from providers.base import InstanceState, Offer


class SideTables:
    store: Store
    owner: str
    fleet: FleetMember | None
    _counted: Counted

    def flush(self) -> None:
        """Write buffered spend (``SqlEngineStore.flush``): budgets read the ledger after it."""

    # --- budgets -------------------------------------------------------------------------------------
    def budget_ledger(self, now: datetime) -> BudgetLedger:
        self.flush()
        with self.store.transaction() as tx:
            return budget_watch.read_ledger(tx, now)

    def plan_attempt_within(self, job_id: int, offer: Offer, launch_ids: Sequence[str], checkpoint: str | None,
                            now: datetime, admit: Callable[[BudgetLedger], BudgetVerdict], *, node_rank: int = 0,
                            generation: int | None = None) -> list[AttemptRecord] | BudgetVerdict:
        """Check and reserve in one transaction, under the store's launch lock: ``admit`` is asked with the
        ledger as it stands (every daemon's reservations included), and the PLANNED attempts (one per launch
        id: node 0 of a new generation, then the gang's other ranks; or ranks ``node_rank``.. of ``generation``)
        are written only if it admits. Their instance rows are the reservation (the ledger's burn counts a live
        attempt's price from then on), the whole gang's at once; each dies with its attempt (an ended attempt
        whose machine never answered burns nothing)."""
        self.flush()
        with self.store.transaction() as tx:
            self._fence(tx, job_id)                 # type: ignore[attr-defined]
            budget_watch.serialise_launches(tx)
            verdict = admit(budget_watch.read_ledger(tx, now))
            if not verdict.allowed:
                return verdict
            rows = [write_attempt(tx, self.owner, job_id, offer, launch_ids[0], checkpoint, now, node_rank,
                                  generation)]
            rows += [write_attempt(tx, self.owner, job_id, offer, lid, checkpoint, now, rank, rows[0].generation)
                     for rank, lid in enumerate(launch_ids[1:], start=node_rank + 1)]
        self._wrote()                               # type: ignore[attr-defined]
        return [self._record(row, offer) for row in rows]     # type: ignore[attr-defined]

    def review_budgets(self, budgets: Sequence[Budget], now: datetime) -> BudgetReview:
        self.flush()
        return budget_watch.review_budgets(self.store, budgets, now)

    def last_refusal(self, job_id: int) -> RefusedLimits | None:
        with self.store.transaction() as tx:
            return budget_watch.last_refusal(tx, job_id)

    # --- the console's -------------------------------------------------------------------------------
    def record_gpu_util(self, samples: Sequence[GpuUtilSample]) -> None:
        if samples:
            with self.store.transaction() as tx:
                gpu_util.record_gpu_util(tx, samples)

    def gpu_util_since(self, attempt_ids: Sequence[int], since: datetime) -> Sequence[GpuUtilSample]:
        with self.store.transaction() as tx:
            return gpu_util.readings_since(tx, attempt_ids, since)

    def relaunch_requests(self, job_ids: Sequence[int]) -> Sequence[RelaunchRequest]:
        """The open requests of ``job_ids``. On PostgreSQL every open request is kept while the server's counts
        of job and request writers read the same (orchestrator/store/changes.py): a fleet's steady tick checks
        them against the counts its claim read this tick, in no transaction of its own (a request committed
        after that read is seen at the next tick)."""
        if not job_ids:
            return []
        wanted = set(job_ids)
        read = self.fleet.counted.last if self.fleet is not None else None
        kept = self._counted.answer(self.store, "open relaunch requests", REQUESTS,
                                    requests.open_relaunch_requests, read=read)
        return [r for r in kept if r.job_id in wanted]

    def take_relaunch_requests(self, now: datetime, job_ids: Sequence[int]) -> Sequence[RelaunchRequest]:
        with self.store.transaction() as tx:
            return requests.take_relaunch_requests(tx, now=now, job_ids=list(job_ids))

    # --- the recovery policy's -----------------------------------------------------------------------
    def spot_history(self, since: datetime) -> Sequence[FleetSpotRun]:
        with self.store.transaction() as tx:
            rows = spot_history.spot_history_columns(tx, self.owner, since)
        return [FleetSpotRun(r.job_id, r.gpu or "", SpotRun(
                    r.zone or r.region, r.started_at, r.ended_at, preempted=r.state == AttemptState.PREEMPTED.value,
                    noticed=r.end_cause == EndCause.NOTICED.value))
                for r in rows]


def write_attempt(tx: Session, owner: str, job_id: int, offer: Offer, launch_id: str, checkpoint: str | None,
                  now: datetime, node_rank: int, generation: int | None) -> Any:
    """Write a PLANNED attempt and its instance row (state pending, the offer's price) in ``tx``; returns
    its columns. The caller has fenced the job."""
    if generation is None:
        generation = (repo.latest_generation(tx, job_id) or 0) + 1
    repo.create_attempt(tx, job_id, launch_id, generation=generation, node_rank=node_rank,
                        checkpoint_restored=checkpoint, now=now)
    repo.record_instance(tx, repo.InstanceRecord(
        provider=offer.provider, launch_id=launch_id, owner=owner, job_id=job_id,
        instance_type=offer.instance_type, region=offer.region, zone=offer.zone, market=offer.market,
        price_hr=offer.price_hr, gpu=offer.gpu, gpu_count=offer.gpu_count, state=InstanceState.PENDING), now=now)
    [row] = queries.attempt_columns_by_launch_ids(tx, [launch_id])
    return row
