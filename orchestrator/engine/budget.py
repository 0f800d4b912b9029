"""The budget step, and the gate the launch step asks before every launch (the config's ``budgets:``).

Decisions are ``orchestrator.money.budgets``' (pure); the facts are the store's spend rollup (``EngineStore.
budget_ledger``, ``review_budgets``). With no budgets configured nothing here reads the store.

* The step (after the spend step, so this tick's money counts): review every budget. A threshold crossed for
  the first time this month is written as ONE ``budget-threshold`` event (the store's alert listener turns
  it into a webhook alert on background workers, so no tick waits on a receiver). At a cap with
  ``stop_at_cap`` (``spot``: the running spot machines of the budget's jobs; ``all``: every running paid one,
  on-demand too; a machine at $0/h, your own, runs on), those machines end like a noticed machine: with
  ``EndCause.BUDGET_CAP`` and ``drain_until`` (``notice_drain``) so the agent can finish an upload and the
  sync records the checkpoints it commits meanwhile; the sweep ends the machine when the drain has passed.
  The rest of a gang ends with them (``EndCause.GANG``, the same drain), whatever its nodes' state or market.
  ONE ``budget-cap-stop`` event per job (an alert) names them. Their jobs go back to PENDING, and the gate
  keeps them there until the month turns. The decision and the drain's end are the store's (the ended
  attempt's state and ``drain_until``), so a restarted daemon, or another one, finishes what this one began.
* The gate (``LaunchGate``, one per tick): a launch whose $/h (all nodes) would break the $/h ceiling or the
  monthly cap of a budget that covers it (every job, its project, or this engine's owner) is refused with a
  ``budget-refused`` event carrying the typed refusals (budget, limit, numbers). The check and the launch's
  reservation (its PLANNED attempts, every node's, whose $/h the ledger counts until each ends) are one transaction
  under the store's launch lock, so the ceiling holds across several daemons on one PostgreSQL store. A gang's
  rank retried on another offer of its site, or planned again beside node 0, is checked and reserved the same way
  (``plan_rank``). A job refused by the same limits again is not written again (one event per change of the
  limits refusing it, until the job launches).
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ending import end_attempt
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import Observed, TickFacts
from orchestrator.engine.gang_end import end_others
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.engine.tick import TickLog
from orchestrator.money.budget_launch import BudgetVerdict, Refusal, RefusedLimits, check_launch, refused_limits
from orchestrator.money.budgets import BudgetLedger, CapStopJob
from orchestrator.money.spend import charged_price_hr, reported_price_hr
from providers.base import Market, Offer, new_launch_id


def refusal_data(refusals: tuple[Refusal, ...]) -> dict[str, object]:
    """The typed reason, as the event's data."""
    return {"refusals": [{"budget": r.budget, "limit": r.limit.value, "limit_usd": r.limit_usd,
                          "current_usd": round(r.current_usd, 4), "adding_usd": round(r.adding_usd, 4)}
                         for r in refusals]}


class LaunchGate:
    """One tick's budget gate. A launch's check and its reservation are one step in the store
    (``EngineStore.plan_attempt_within``): the ledger is read under the store's launch lock, with every
    engine's planned attempts counted, so several daemons launching at once cannot break a ceiling together."""

    def __init__(self, deps: EngineDeps, now: datetime, refused: dict[int, RefusedLimits]) -> None:
        self._deps = deps
        self._now = now
        self._refused = refused         # the BudgetStep's memory: which limits last refused each job

    def plan(self, job: JobRecord, offer: Offer, price_hr: float,
             checkpoint: str | None) -> list[AttemptRecord] | BudgetVerdict:
        """The PLANNED attempts for ``offer``, one per node (node 0 first; ``price_hr``: all its nodes), or the
        verdict refusing them. With budgets, the whole gang's $/h is checked and reserved in one step."""
        budgets = self._deps.config.budgets
        store = self._deps.store
        launch_ids = [new_launch_id(self._deps.config.store_id) for _ in range(job.spec.plan.nodes)]
        if not budgets or price_hr <= 0:
            head = store.plan_attempt(job.id, offer, launch_ids[0], checkpoint, self._now)
            return [head, *(store.plan_attempt(job.id, offer, lid, checkpoint, self._now, node_rank=rank,
                                               generation=head.generation)
                            for rank, lid in enumerate(launch_ids[1:], start=1))]

        def admit(ledger: BudgetLedger) -> BudgetVerdict:
            return check_launch(budgets, ledger, project=job.manifest.project, price_hr=price_hr,
                                hours=job.spec.plan.estimated_hours, owner=self._deps.config.owner)

        return store.plan_attempt_within(job.id, offer, launch_ids, checkpoint, self._now, admit)

    def plan_rank(self, job: JobRecord, offer: Offer, checkpoint: str | None, *, node_rank: int,
                  generation: int) -> AttemptRecord | BudgetVerdict:
        """One rank of a planned gang, on ``offer`` (a retry on another offer of the site, or a rank planned
        again beside node 0): checked and reserved at that offer's per-node $/h in the same locked step as
        ``plan``, against a ledger that counts the gang's live ranks (a refused rank's attempt has ended, so
        its reservation is gone). Returns the PLANNED attempt or the verdict refusing it."""
        budgets = self._deps.config.budgets
        store = self._deps.store
        launch_id = new_launch_id(self._deps.config.store_id)
        if not budgets or offer.price_hr <= 0:
            return store.plan_attempt(job.id, offer, launch_id, checkpoint, self._now, node_rank=node_rank,
                                      generation=generation)

        def admit(ledger: BudgetLedger) -> BudgetVerdict:
            return check_launch(budgets, ledger, project=job.manifest.project, price_hr=offer.price_hr,
                                hours=job.spec.plan.estimated_hours, owner=self._deps.config.owner)

        planned = store.plan_attempt_within(job.id, offer, [launch_id], checkpoint, self._now, admit,
                                            node_rank=node_rank, generation=generation)
        return planned if isinstance(planned, BudgetVerdict) else planned[0]

    def launched(self, job_id: int) -> None:
        """The job got its machines: a later refusal is a change, written again. (Not on a plan admitted:
        a gang admitted whose rank's retry is refused every tick would then write one event per tick.)"""
        self._refused.pop(job_id, None)

    def refused(self, job: JobRecord, verdict: BudgetVerdict, what: str) -> None:
        """Write the refusal (once per job per change of the limits that refuse it, across restarts and
        daemons: a job this daemon has not refused yet is checked against the store's newest refusal)."""
        limits = refused_limits(verdict.refusals)
        known = self._refused.get(job.id)
        if known is None:
            known = self._deps.store.last_refusal(job.id)
        self._refused[job.id] = limits
        if known == limits:
            return
        self._deps.store.event(EventKind.BUDGET_REFUSED, f"launch refused ({what}): {verdict.reason()}", self._now,
                               job_id=job.id, data=refusal_data(verdict.refusals))


class BudgetStep:
    def __init__(self) -> None:
        self._refused: dict[int, RefusedLimits] = {}

    def gate(self, deps: EngineDeps, now: datetime) -> LaunchGate:
        return LaunchGate(deps, now, self._refused)

    def run(self, deps: EngineDeps, facts: TickFacts, log: TickLog) -> None:
        if not deps.config.budgets:
            return
        result = deps.store.review_budgets(deps.config.budgets, facts.now)
        if result.cap_stops:
            _stop_at_cap(deps, facts, log, {s.job_id: s for s in result.cap_stops})
        self._refused = {k: v for k, v in self._refused.items() if k in facts.jobs}


def _price_hr(seen: Observed) -> float:
    """What ``seen``'s machine bills now: its cloud's reported $/h, else the one recorded, else its quote (the
    spend step's rate, read here from the facts: a $0/h machine of your own is not paid)."""
    a = seen.attempt
    reported = reported_price_hr(seen.instance.price_hr) if seen.instance is not None else None
    quoted = a.launch_price_hr if a.launch_price_hr is not None else a.offer.price_hr
    return charged_price_hr(reported if reported is not None else a.actual_price_hr, quoted)


def _stop_at_cap(deps: EngineDeps, facts: TickFacts, log: TickLog, stops: dict[int, CapStopJob]) -> None:
    """End the running machines of ``stops``' jobs that their stop covers, after a drain, as a notice would;
    their gangs end whole; their jobs wait. One ``budget-cap-stop`` event per job."""
    drain = facts.now + deps.config.notice_drain
    stopped: dict[int, list[Observed]] = {}
    for seen in facts.observed:
        a = seen.attempt
        stop = stops.get(a.job_id)
        spot = a.offer.market is Market.SPOT
        if (stop is None or a.state is not AttemptState.RUNNING or a.id in log.ended
                or not stop.stop.ends(spot=spot, price_hr=_price_hr(seen))):
            continue
        # A spot machine ends PREEMPTED, as it always has; an on-demand one TERMINATED: as PREEMPTED it would
        # count as a preemption in its job's recovery facts and keep its zone out as if its spot ran dry.
        final = AttemptState.PREEMPTED if spot else AttemptState.TERMINATED
        why = f"budget {', '.join(stop.budgets)} at its monthly cap: ended after a {deps.config.notice_drain} drain"
        end_attempt(deps, a, final, EndCause.BUDGET_CAP, why, facts.now, log, drain_until=drain)
        stopped.setdefault(a.job_id, []).append(seen)
    for job_id, ended in stopped.items():
        stop, head = stops[job_id], ended[0]
        capped = ", ".join(stop.budgets)
        machines = [f"{s.attempt.offer.provider} {s.attempt.instance_id} ({s.attempt.offer.market.value})"
                    for s in ended]
        deps.store.event(EventKind.BUDGET_CAP_STOP,
                         f"budget {capped} at its monthly cap (stop_at_cap: {stop.stop}): {', '.join(machines)} "
                         f"ended after a {deps.config.notice_drain} drain", facts.now, job_id=job_id,
                         data={"budgets": capped, "stop_at_cap": stop.stop.value, "drain_until": drain.isoformat(),
                               "machines": machines})
        # The rest of a gang ends with it (after the same drain): a rank not started yet (its node 0 gone, it
        # never will) or on another market would otherwise bill on with its job PENDING.
        end_others(deps, head.job, head.attempt, f"gang: budget {capped} at its monthly cap", facts.now, log,
                   drain_until=drain)
        deps.store.set_job_status(job_id, JobStatus.PENDING, facts.now)
