"""A job's own ``policies.budget_usd``, while it runs (the config's ``budgets:`` are orchestrator/engine/budget.py).

After the spend step, so this tick's money counts: a job holding machines whose spend (the store's total plus
this tick's charges) has reached its budget is stopped (once a cloud holding them answers its listing): one
``budget-stop`` event (an alert), its machines ended (``EndCause.BUDGET_STOP``), the job STOPPED, so nothing
launches it again. Checkpoint first when it can: a
running machine of a job with a checkpoint store whose agent orch can reach (``Bootstrapper.ask_checkpoint``:
the report store's ``checkpoint-now.json``, which the agent takes as an interrupting notice: checkpoint now,
stop the job once it is complete, upload it) is left ``notice_drain`` to do so, as is a machine whose agent
reports complete checkpoints not yet uploaded (the sync records what it commits meanwhile; the sweep ends it
after), as after a preemption notice; every other machine ends at once.

The launch step's refusal of a job whose budget an offer would break is written once per budget value (this
step's memory), not on every tick the job waits.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.engine import gang
from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ending import end_attempt
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import Observed, TickFacts
from orchestrator.engine.hooks import ask_checkpoint
from orchestrator.engine.ports import JobRecord
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.engine.tick import TickLog
from orchestrator.words import plural


class JobBudgetStep:
    def __init__(self) -> None:
        #: Per job, the budget its last launch refusal was written for (refusals are written once per value).
        self._refused: dict[int, float] = {}

    def run(self, deps: EngineDeps, facts: TickFacts, log: TickLog, charged: Mapping[int, float]) -> None:
        """Stop every job holding machines whose spend has reached its ``budget_usd``; ``charged``: this
        tick's charges per job (the facts' totals were read before them)."""
        self._refused = {k: v for k, v in self._refused.items() if k in facts.jobs}
        for job in facts.jobs.values():
            limit = job.spec.budget_usd
            if limit is None or job.id not in facts.held_jobs:
                continue
            spent = job.spent_usd + charged.get(job.id, 0.0)
            if spent >= limit:
                held = [o for o in facts.observed if o.attempt.job_id == job.id and o.attempt.state.is_live
                        and o.attempt.id not in log.ended]
                if held:    # else its machines are on a cloud that did not answer: stopped when it does, once
                    _stop(deps, job, held, spent, facts, log)

    def first_refusal(self, job: JobRecord) -> bool:
        """Whether the launch step's refusal of ``job`` by its own budget is new (then remembered)."""
        if self._refused.get(job.id) == job.spec.budget_usd:
            return False
        self._refused[job.id] = job.spec.budget_usd or 0.0
        return True

    def launched(self, job_id: int) -> None:
        self._refused.pop(job_id, None)


def _stop(deps: EngineDeps, job: JobRecord, held: list[Observed], spent: float, facts: TickFacts,
          log: TickLog) -> None:
    now = facts.now
    why = f"budget ${job.spec.budget_usd:.2f} reached (${spent:.2f} spent): stopped"
    asked = [o for o in held if _asked_to_checkpoint(deps, job, o, why, log)]
    draining = [o for o in held if o in asked or (o.agent is not None and o.agent.pending_uploads > 0
                                                   and o.machine_running)]
    drain = now + deps.config.notice_drain if draining else None
    told = ""
    if drain is not None:
        told = (f", {plural(len(asked), 'machine')} asked to checkpoint first" if asked else "") + (
            f", checkpoint uploads from {plural(len(draining), 'machine')} until "
            f"{drain.isoformat(timespec='seconds')}")
    deps.store.event(EventKind.BUDGET_STOP, why + told, now, job_id=job.id,
                     data={"budget_usd": job.spec.budget_usd, "spent_usd": round(spent, 4),
                           "checkpoint_asked": len(asked)})
    for o in held:
        end_attempt(deps, o.attempt, AttemptState.TERMINATED, EndCause.BUDGET_STOP, why, now, log,
                    drain_until=drain if o in draining else None)
    if held:
        gang.end_others(deps, job, held[0].attempt, f"gang: {why}", now, log)
    deps.store.set_job_status(job.id, JobStatus.STOPPED, now)
    log.report.terminated += len(held)


def _asked_to_checkpoint(deps: EngineDeps, job: JobRecord, seen: Observed, why: str, log: TickLog) -> bool:
    """Whether the node was asked to checkpoint now, then stop (the channel an interrupting notice drives on
    the node): only a running machine of a job with a checkpoint store, whose agent orch can reach. The ask is
    best effort: one that raises is not asked (an error in the tick's report), so the stop goes on."""
    if job.manifest.checkpoint is None or not seen.machine_running or seen.instance is None:
        return False
    try:
        return ask_checkpoint(deps.hooks.bootstrapper, job, seen.attempt, seen.instance, why)
    except Exception as exc:
        log.report.errors.append(f"ask {seen.attempt.launch_id} to checkpoint: {exc}")
        return False
