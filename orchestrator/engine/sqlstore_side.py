"""The SQL engine store's side tables: budgets (the spend rollup, threshold events) and the web console's
(GPU utilization, relaunch requests). Mixed into ``SqlEngineStore``; each method is its own transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from orchestrator import budget_watch
from orchestrator.budgets import Budget, BudgetLedger, BudgetReview
from orchestrator.store import gpu_util, requests
from orchestrator.store.db import Store
from orchestrator.store.gpu_util import GpuUtilSample
from orchestrator.store.requests import RelaunchRequest


class SideTables:
    store: Store

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
