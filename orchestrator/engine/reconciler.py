"""The reconcile loop: make the clouds match the store, crash-safely, one tick at a time.

Each tick is one passive phase, then active steps (Ray autoscaler v2's ``_sync_from`` / ``_step_next``,
Karpenter's controllers), each its own module, each taking the tick's facts as a value:

1. ``sync``: list the clouds FIRST, read the nodes' agents, mirror both into the store; return the facts.
   Decides nothing, launches nothing.
2. ``spend``: charge the machines' time up to now.
   ``budget``: review the config's budgets (threshold alerts once; at a cap, drain spot machines if asked).
   ``job_budget``: stop a job whose own ``budget_usd`` is spent.
3. ``start``: start the job on machines that are up (LAUNCHED -> BOOTSTRAPPING -> RUNNING).
4. ``finish``: jobs whose process exited succeed or fail.
   ``liveness``: end nodes past a deadline (never reported since launch, agent silent, the cloud listing
   them unreachable past the grace); the facts it returns carry them as lost.
5. ``recover``: the one place that decides what a preemption, a notice, a waiting recovery or an
   approaching deadline leads to; it hands relaunches to the launch step.
   ``requests``: take the console's "relaunch now" requests: end the job's machines, order a launch.
6. ``idle``: stop or terminate machines idle for their whole window.
7. ``teardown``: end the machines of jobs no longer wanted; re-ask terminations in flight.
8. ``sweep``: end stragglers of ended attempts (after a notice's drain) and orphans (after the grace); the
   stragglers the cloud lists billing are charged (``spend``) until they are gone.
9. ``launch``: re-ask launches the cloud never saw, complete gangs, carry out the recovery's orders,
   launch pending jobs.
10. ``metrics``: the agents' GPU utilization into the store (the console), Prometheus gauges.

Every step that changes a cloud writes the store before (LAUNCH_REQUESTED with the launch id,
TERMINATE_REQUESTED) and after (LAUNCHED with the instance id, an end state with its EndCause), so a
process killed at any point resumes correctly: no duplicate launch (launch ids are idempotency keys), no
leaked instance (orphans are collected), no forgotten job (state lives in the store). docs/engine.md maps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from orchestrator.engine import finish, launch, requests, start, teardown
from orchestrator.engine.budget import BudgetStep
from orchestrator.engine.config import EngineDeps, EngineHooks
from orchestrator.engine.crashpoints import crashpoint
from orchestrator.engine.idle import IdleStep
from orchestrator.engine.idle_rule import UtilSample
from orchestrator.engine.job_budget import JobBudgetStep
from orchestrator.engine.liveness import LivenessStep
from orchestrator.engine.metrics import MetricsStep
from orchestrator.engine.recover import RecoveryStep
from orchestrator.engine.spend import SpendStep
from orchestrator.engine.sweep import SweepStep
from orchestrator.engine.sync import SyncMemo, sync
from orchestrator.engine.tick import TickLog, TickReport
from orchestrator.engine.wake import WakeWatch, Watched, watch_list
from providers.base import Offer

__all__ = ["Reconciler"]


class Reconciler:
    """Built by ``orchestrator.daemon.assembly.build_service``. Keeps, between ticks, only the steps' own memory
    (spend marks, utilization windows, orphans' first sightings, the recovery's spot facts)."""

    def __init__(self, deps: EngineDeps) -> None:
        self.deps = deps
        self._spend = SpendStep()
        self._budget = BudgetStep()
        self._job_budget = JobBudgetStep()
        self._recovery = RecoveryStep()
        self._idle = IdleStep()
        self._liveness = LivenessStep()
        self._sweep = SweepStep()
        self._seen = SyncMemo()
        self._metrics = MetricsStep()
        deps.store.settle_before_reads(self.settle_spend)
        #: What may make the next tick due early (a notice, a predecessor's commit): the daemon asks it.
        self.wake = WakeWatch(deps.hooks.monitor)

    @property
    def hooks(self) -> EngineHooks:
        return self.deps.hooks

    @property
    def catalog(self) -> Sequence[Offer]:
        return self.deps.catalog

    @catalog.setter
    def catalog(self, offers: Sequence[Offer]) -> None:
        """Swap the catalog the engine plans from (the daemon's scheduled refresh:
        orchestrator/daemon/catalog_schedule.py), and the store's copy its attempts' offers are rebuilt from."""
        self.deps = replace(self.deps, catalog=tuple(offers))
        self.deps.store.use_catalog(self.deps.catalog)
        self._recovery.facts.forget_catalog()

    def settle_spend(self) -> None:
        """Charge the machines' time up to the last tick into the store (before it reads or writes spend)."""
        self._spend.settle(self.deps.store)

    def utilization(self, attempt_id: int) -> tuple[UtilSample, ...]:
        """The GPU utilization samples idle detection holds for an attempt."""
        return self._idle.samples(attempt_id)

    def tick(self) -> TickReport:
        with self.wake.ticking:
            log, watch = self._tick()
        # A machine launched this tick is started by a later one: that one is due at once.
        self.wake.after_tick(watch, again=bool(log.report.relaunched or log.report.launched))
        return log.report

    def _tick(self) -> tuple[TickLog, tuple[Watched, ...]]:
        log = TickLog()
        facts = sync(self.deps, self.deps.clock(), log.report, self._seen)
        crashpoint("after-sync")     # what the clouds said is written; no step has acted on it yet
        charged = self._spend.run(self.deps, facts)
        self._budget.run(self.deps, facts, log)
        self._job_budget.run(self.deps, facts, log, charged)
        start.run(self.deps, facts, log)
        finish.run(self.deps, facts, log)
        facts = self._liveness.run(self.deps, facts, log)
        orders = self._recovery.run(self.deps, facts, log)
        orders += requests.run(self.deps, facts, log)
        self._idle.run(self.deps, facts, log)
        teardown.run(self.deps, facts, log)
        self._spend.charge_stragglers(self.deps.store, self._sweep.run(self.deps, facts, log), facts.now)
        launch.run(self.deps, facts, log, orders, self._budget.gate(self.deps, facts.now), self._job_budget)
        self._metrics.run(self.deps, facts)
        return log, watch_list(facts)
