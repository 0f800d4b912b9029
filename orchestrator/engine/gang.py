"""Multi-node jobs: a gang of N attempts of one generation (node ranks 0..N-1), on one site, restarted whole.

All ranks are written PLANNED before any cloud call, so a crash leaves the whole gang for the next tick to
re-ask; a gang missing ranks after a crash is completed beside node 0, or ended when that cannot be done.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from orchestrator.engine.budget import LaunchGate
from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ending import request_termination
from orchestrator.engine.events import EventKind
from orchestrator.engine.gang_end import end_others, others_live
from orchestrator.engine.launching import request_launch
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.engine.tick import TickLog
from orchestrator.money.budget_launch import BudgetVerdict
from providers.base import Offer

__all__ = ["abort", "complete", "end_others", "launch", "others_live", "site_offers"]


def site_offers(first: Offer, eligible: Sequence[Offer]) -> list[Offer]:
    """Where a gang's other nodes may go: node 0's offer first, then the eligible offers of the same
    provider, region, GPU and count (one site, so the nodes share a fast network), cheapest first."""
    same = [o for o in eligible if o != first and o.provider == first.provider and o.region == first.region
            and o.gpu == first.gpu and o.gpu_count == first.gpu_count]
    return [first, *same]


def launch(deps: EngineDeps, job: JobRecord, planned: Sequence[AttemptRecord], eligible: Sequence[Offer],
           now: datetime, log: TickLog, gate: LaunchGate) -> bool | BudgetVerdict:
    """Launch a gang whose nodes are all PLANNED already (``planned``: node 0 first, one generation; the launch
    gate wrote them together, so the whole gang's $/h was reserved before any cloud call). A rank the cloud
    refuses tries the next same-site offer, each checked and reserved by ``gate`` first; if none takes it the
    gang is ended (every rank's reservation with it): False, or the budget's verdict when a budget refused a
    retry (written as a ``budget-refused`` event; the job waits, as for a gang refused whole)."""
    first = planned[0]
    if not request_launch(deps, job, first, now, log):
        abort(deps, job, first, "node 0 could not launch", now, log)
        return False
    for attempt in planned[1:]:
        taken = _launch_rank(deps, job, attempt, site_offers(first.offer, eligible), now, log, gate)
        if taken is True:
            continue
        if isinstance(taken, BudgetVerdict):
            abort(deps, job, first, f"node {attempt.node_rank}'s retry was refused by a budget", now, log)
        else:
            abort(deps, job, first, f"node {attempt.node_rank} found no capacity beside node 0", now, log)
        return taken
    return True


def _launch_rank(deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, offers: Sequence[Offer],
                 now: datetime, log: TickLog, gate: LaunchGate) -> bool | BudgetVerdict:
    """Launch one rank of a gang: its planned offer, then each other offer of the site (cheapest first), each
    reserved in the gate's locked step after the refused attempt ended (and its reservation with it). A budget
    refusing one offer refuses the dearer ones too: the verdict is returned (and written) at once."""
    if request_launch(deps, job, attempt, now, log):
        return True
    for offer in offers:
        if offer == attempt.offer:
            continue
        retry = gate.plan_rank(job, offer, attempt.checkpoint_restored, node_rank=attempt.node_rank,
                               generation=attempt.generation)
        if isinstance(retry, BudgetVerdict):
            gate.refused(job, retry, f"node {attempt.node_rank} on {offer.provider}/{offer.instance_type} "
                                     f"${offer.price_hr:.2f}/h")
            return retry
        if request_launch(deps, job, retry, now, log):
            return True
    return False


def abort(deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, reason: str, now: datetime,
          log: TickLog) -> None:
    """End a gang that cannot be completed: its other nodes, then ``attempt`` itself."""
    end_others(deps, job, attempt, f"gang: {reason}", now, log)
    fresh = deps.store.attempt_by_launch_id(attempt.launch_id)
    if fresh is not None and fresh.state.is_live:
        if fresh.instance_id:
            request_termination(deps, fresh, EndCause.GANG, f"gang: {reason}", now, log)
        else:
            log.ended.add(fresh.id)
            deps.store.set_attempt_state(fresh.id, AttemptState.TERMINATED, now, reason=f"gang: {reason}",
                                         cause=EndCause.GANG)
    deps.store.event(EventKind.GANG_ABORTED, f"multi-node launch abandoned: {reason}", now, job_id=job.id)


def complete(deps: EngineDeps, job: JobRecord, live: Sequence[AttemptRecord], now: datetime,
             log: TickLog, gate: LaunchGate) -> None:
    """After a crash between planning a gang's ranks: plan the missing ranks beside node 0 (each checked and
    reserved by ``gate``), or end the gang when a rank was refused for good or by a budget (the job then
    plans a new gang)."""
    generation = max(a.generation for a in live)
    gang = [a for a in live if a.generation == generation]
    if len(gang) >= job.spec.plan.nodes:
        return
    have = {a.node_rank for a in gang}
    head = next((a for a in gang if a.node_rank == 0), None)
    if head is None:
        abort(deps, job, gang[0], "node 0 is gone", now, log)
        deps.store.set_job_status(job.id, JobStatus.PENDING, now)
        return
    for rank in range(job.spec.plan.nodes):
        if rank in have:
            continue
        attempt = gate.plan_rank(job, head.offer, head.checkpoint_restored, node_rank=rank, generation=generation)
        if isinstance(attempt, BudgetVerdict):
            gate.refused(job, attempt, f"node {rank} on {head.offer.provider}/{head.offer.instance_type} "
                                       f"${head.offer.price_hr:.2f}/h")
            abort(deps, job, head, f"node {rank} was refused by a budget", now, log)
        elif request_launch(deps, job, attempt, now, log):
            continue
        else:
            abort(deps, job, head, f"node {rank} could not launch", now, log)
        deps.store.set_job_status(job.id, JobStatus.PENDING, now)
        return
