"""The launch step: get machines for jobs that need one. The last active step of a tick.

In order: ask again for launches the cloud never saw (same launch id), complete gangs a crash left short,
carry out the recovery step's orders (a preempted job's replacement, a deadline move), and launch pending
jobs. Offers are tried cheapest first; capacity and quota refusals move on to the next. With
``EngineConfig.launches_allowed`` False the step does nothing. It decides no recovery: that is
orchestrator/engine/recover.py's, which hands its decisions here as ``LaunchOrder``s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from orchestrator.engine import gang
from orchestrator.engine.budget import LaunchGate
from orchestrator.engine.config import EngineDeps
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import TickFacts
from orchestrator.engine.job_budget import JobBudgetStep
from orchestrator.engine.launching import request_launch
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.recovery_facts import preempted_places
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.engine.tick import TickLog
from orchestrator.money.budget_launch import BudgetVerdict
from orchestrator.money.spend import would_break_budget
from orchestrator.offers.planner import PlannedOffer, plan
from orchestrator.offers.sources import offer_sources
from providers.base import Capability, Market


@dataclass(frozen=True, slots=True)
class LaunchOrder:
    """The recovery step's decision that ``job_id`` gets a machine now, and where it may look."""

    job_id: int
    markets: frozenset[Market] | None = None       # None: the job's own
    exclude: frozenset[str] = frozenset()          # zones (else regions) to keep out
    relaunch: bool = False                         # counts as one relaunch of the job
    #: A preemption's replacement: counted in the tick's report and timed (seen -> launch accepted).
    preemption_seen_at: datetime | None = None


def run(deps: EngineDeps, facts: TickFacts, log: TickLog, orders: Sequence[LaunchOrder], gate: LaunchGate,
        own: JobBudgetStep | None = None) -> None:
    if not deps.config.launches_allowed:
        return
    _ask_again(deps, facts, log)
    attempts = deps.store.live_attempts()
    # A machine being ended is no one's any more. The per-job lists only for gangs to complete (a set for the rest:
    # a steady tick at 10k jobs builds no 10k lists).
    holding = {a.job_id for a in attempts if a.state is not AttemptState.TERMINATE_REQUESTED}
    live_by_job: dict[int, list[AttemptRecord]] | None = None
    by_job = {o.job_id: o for o in orders}
    for job in deps.store.active_jobs():
        if job.id in holding:
            if job.spec.plan.nodes > 1 and job.status in (JobStatus.LAUNCHING, JobStatus.RECOVERING):
                if live_by_job is None:
                    live_by_job = {}
                    for a in attempts:
                        if a.state is not AttemptState.TERMINATE_REQUESTED:
                            live_by_job.setdefault(a.job_id, []).append(a)
                gang.complete(deps, job, live_by_job[job.id], facts.now, log, gate)
            continue
        order = by_job.get(job.id)
        if order is not None:
            _carry_out(deps, job, order, facts.now, log, gate, own)
        elif job.status is JobStatus.PENDING:
            # A job whose relaunch failed comes back here PENDING: it still keeps its preempted zones out.
            launch_job(deps, job, facts.now, log, gate, exclude=cooling_places(deps, job, facts.now), own=own)


def _ask_again(deps: EngineDeps, facts: TickFacts, log: TickLog) -> None:
    """Launches the cloud never saw (orch died before asking): ask again with the SAME launch id."""
    for seen in facts.observed:
        a = seen.attempt
        if (a.state in (AttemptState.PLANNED, AttemptState.LAUNCH_REQUESTED) and a.id not in log.ended
                and seen.job.desired_active):
            request_launch(deps, seen.job, a, facts.now, log)


def _carry_out(deps: EngineDeps, job: JobRecord, order: LaunchOrder, now: datetime, log: TickLog,
               gate: LaunchGate, own: JobBudgetStep | None) -> None:
    launched = launch_job(deps, job, now, log, gate, exclude=order.exclude, markets=order.markets,
                          relaunch=order.relaunch, own=own)
    if launched is None or order.preemption_seen_at is None:
        return
    log.report.relaunched += 1
    if deps.metrics:
        deps.metrics.relaunch_latency.observe((deps.clock() - order.preemption_seen_at).total_seconds())


def cooling_places(deps: EngineDeps, job: JobRecord, now: datetime) -> frozenset[str]:
    """Zones (or regions) where this job was preempted within its cool-down."""
    if job.relaunch_count == 0 and job.status is JobStatus.PENDING:
        return frozenset()   # never preempted: no history to read (keeps a steady tick query-free)
    return preempted_places(deps.store.attempts_for_job(job.id), now, job.spec.cooldown)


def launch_job(deps: EngineDeps, job: JobRecord, now: datetime, log: TickLog, gate: LaunchGate, *,
               exclude: frozenset[str] = frozenset(), markets: frozenset[Market] | None = None,
               relaunch: bool = False, own: JobBudgetStep | None = None) -> AttemptRecord | None:
    """Try eligible offers cheapest first; move on after capacity/quota errors. Returns the attempt.

    Before each launch the job's own ``budget_usd`` and the config's budgets (``gate``) are asked; a budget
    refusing the cheapest offer refuses every dearer one too, so the job waits (PENDING). ``own`` (the job
    budget step) keeps the job's own budget's refusal to one event per budget value, not one per tick. A job
    moved off spot for its deadline launches on demand only until it has a machine again (``moved_off_spot``)."""
    if job.spec.deadline is not None and moved_off_spot(deps.store.attempts_for_job(job.id)):
        markets = frozenset({Market.ON_DEMAND})
    candidates = _candidates(deps, job, now, exclude, markets)
    if candidates is None:
        return None
    eligible = [c.offer for c in candidates]
    checkpoint = deps.store.last_checkpoint(job.id)
    hours = job.spec.plan.estimated_hours or 1.0
    refused: list[str] = []
    for candidate in candidates:
        offer = candidate.offer
        if (job.id, offer.provider) in log.unbootable:
            continue   # its boot script cannot be built for this provider (an event said why): no attempt per offer
        if would_break_budget(job.spent_usd, candidate.total_price_hr, hours, job.spec.budget_usd):
            refused.append(f"{offer.provider}/{offer.instance_type} ${candidate.total_price_hr:.2f}/h")
            continue
        planned = gate.plan(job, offer, candidate.total_price_hr, checkpoint)
        if isinstance(planned, BudgetVerdict):
            gate.refused(job, planned, f"{offer.provider}/{offer.instance_type} ${candidate.total_price_hr:.2f}/h")
            break
        attempt = planned[0]
        deps.store.set_job_status(job.id, JobStatus.LAUNCHING, now, relaunched=relaunch)
        relaunch = False  # counted once per recovery, not per offer tried
        launched = (gang.launch(deps, job, planned, eligible, now, log, gate) if job.spec.plan.nodes > 1
                    else request_launch(deps, job, attempt, now, log))
        if isinstance(launched, BudgetVerdict):
            break            # a budget refused a rank's retry (the event is written): the job waits
        if launched:
            gate.launched(job.id)
            if own is not None:
                own.launched(job.id)
            return attempt
    if refused and (own is None or own.first_refusal(job)):
        deps.store.event(EventKind.BUDGET_REFUSED, f"launch refused: would break the budget ${job.spec.budget_usd:.2f} "
                         f"({', '.join(refused[:3])})", now, job_id=job.id)
    deps.store.set_job_status(job.id, JobStatus.PENDING, now)
    if not candidates:
        deps.store.event(EventKind.NO_OFFER, "no eligible offer for the job's constraints", now, job_id=job.id)
    return None


def moved_off_spot(attempts: Sequence[AttemptRecord]) -> bool:
    """Whether the job's newest machine was ended to move it off spot for its deadline (``EndCause.DEADLINE_MOVE``;
    launches the cloud refused had no machine). Its next one is then on demand, whoever launches it: the move's
    own order, or, after that launch was refused or the daemon restarted or another one took the job over, a
    plain launch of the PENDING job, whose cheapest offer would be spot again, to be moved again a tick later.
    The ended attempt is the store's record of the decision."""
    had = [a for a in attempts if a.end_cause is not EndCause.LAUNCH_REFUSED]
    return bool(had) and max(had, key=lambda a: a.id).end_cause is EndCause.DEADLINE_MOVE


def _candidates(deps: EngineDeps, job: JobRecord, now: datetime, exclude: frozenset[str],
                markets: frozenset[Market] | None) -> list[PlannedOffer] | None:
    """The job's eligible offers, cheapest first, on configured providers (None: none is configured)."""
    # An allow list none of which is configured means no offer (an empty allow list means "any provider").
    usable = tuple(p for p in (job.spec.plan.providers_allow or deps.providers) if p in deps.providers)
    if not usable:
        deps.store.set_job_status(job.id, JobStatus.PENDING, now)
        deps.store.event(EventKind.NO_OFFER, "none of the job's allowed providers is configured", now, job_id=job.id)
        return None
    req = replace(job.spec.plan, exclude_zones=job.spec.plan.exclude_zones | exclude,
                  markets=markets or job.spec.plan.markets, providers_allow=usable)
    sources = offer_sources(deps.catalog, providers=deps.providers, live=deps.config.use_live_offers)
    the_plan = plan(req, sources.offers(req.gpu_request()))
    return [c for c in the_plan.eligible if job.spec.plan.nodes == 1
            or Capability.MULTI_NODE in deps.providers[c.offer.provider].capabilities]

