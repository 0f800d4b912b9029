"""The SQL engine store's side tables: budgets (the spend rollup, threshold events), the web console's
(GPU utilization, relaunch requests) and the fleet's spot history (the recovery policy's). Mixed into
``SqlEngineStore``; each method is its own transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from orchestrator import budget_watch
from orchestrator.budgets import Budget, BudgetLedger, BudgetReview
from orchestrator.engine.ports import FleetSpotRun
from orchestrator.recovery import SpotRun
from orchestrator.store import gpu_util, requests, spot_history
from orchestrator.store.db import Store
from orchestrator.store.gpu_util import GpuUtilSample
from orchestrator.store.models import AttemptState, EndCause
from orchestrator.store.requests import RelaunchRequest


class SideTables:
    store: Store
    owner: str

    def flush(self) -> None:
        """Write buffered spend (``SqlEngineStore.flush``): budgets read the ledger after it."""

    # --- budgets -------------------------------------------------------------------------------------
    def budget_ledger(self, now: datetime) -> BudgetLedger:
        self.flush()
        with self.store.transaction() as tx:
            return budget_watch.read_ledger(tx, now)

    def review_budgets(self, budgets: Sequence[Budget], now: datetime) -> BudgetReview:
        self.flush()
        return budget_watch.review_budgets(self.store, budgets, now)

    # --- the console's -------------------------------------------------------------------------------
    def record_gpu_util(self, samples: Sequence[GpuUtilSample]) -> None:
        if samples:
            with self.store.transaction() as tx:
                gpu_util.record_gpu_util(tx, samples)

    def relaunch_requests(self, job_ids: Sequence[int]) -> Sequence[RelaunchRequest]:
        with self.store.transaction() as tx:
            return requests.open_relaunch_requests(tx, job_ids)

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
