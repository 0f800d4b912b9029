"""The recovery step: the ONE place that decides what happens to a job whose machine is going or gone.

It reads the tick's facts and asks the job's RecoveryPolicy (orchestrator/engine/recovery_policy.py) in four cases:

* the cloud took a machine (the sync already marked the attempt PREEMPTED, or FAILED/LOST on demand), or the
  liveness step ended it past a deadline (FAILED, BOOT_TIMEOUT/SILENT/UNREACHABLE: recovered as after a
  preemption, its place kept out for the cool-down);
* an agent heard a preemption notice: drain the machine (PREEMPTED, ``EndCause.NOTICED``, ``drain_until``)
  or, for a single-node spot machine the policy says can save nothing before it goes, END it at once;
* a RECOVERING job with no machine (the policy said WAIT, or a crash interrupted a recovery): decide again;
* a single-node spot job running with a deadline and an estimate: move it to on-demand if the policy says.

After a preemption the rest of a multi-node gang ends too (after the drain, on a notice). The decision to
relaunch is handed to the launch step as a ``LaunchOrder``; this step buys nothing itself.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.engine import gang
from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ending import end_attempt
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import Observed, TickFacts
from orchestrator.engine.launch import LaunchOrder
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.recovery_facts import RecoveryFacts, cooled_places, preempted_places
from orchestrator.engine.recovery_policy import RecoveryAction
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.engine.sync import record_preemption
from orchestrator.engine.tick import TickLog
from providers.base import Market

#: The job status each end cause leads to, strongest first (a gang's nodes may end for several causes).
_STATUS_AFTER = ((frozenset({EndCause.PREEMPTED, EndCause.NOTICED, EndCause.DEADLINE_MOVE, EndCause.BOOT_TIMEOUT,
                              EndCause.SILENT, EndCause.UNREACHABLE}), JobStatus.RECOVERING),
                 (frozenset({EndCause.FAILED}), JobStatus.FAILED),
                 (frozenset({EndCause.IDLE_STOPPED, EndCause.IDLE_TERMINATED, EndCause.BUDGET_STOP}),
                  JobStatus.STOPPED))


def status_after(causes: set[EndCause]) -> JobStatus:
    """What a job whose last machines ended for ``causes`` is now (PENDING: it needs a machine again)."""
    for which, status in _STATUS_AFTER:
        if causes & which:
            return status
    return JobStatus.SUCCEEDED if causes == {EndCause.SUCCEEDED} else JobStatus.PENDING


class RecoveryStep:
    def __init__(self) -> None:
        self.facts = RecoveryFacts()
        #: (attempt id, the agent's notice key) of the advisories already recorded: one event each.
        self._advised: set[tuple[int, str]] = set()

    def run(self, deps: EngineDeps, facts: TickFacts, log: TickLog) -> list[LaunchOrder]:
        orders: list[LaunchOrder | None] = []
        decided: set[int] = set()
        self.facts.begin_tick()
        changed = facts.changed
        for seen in facts.observed:
            if changed is not None and seen.attempt.id not in changed:
                continue    # unchanged since last tick: not lost, no report (so no notice, no advisory)
            self._record_advisories(deps, seen, facts.now)
            job = facts.jobs.get(seen.attempt.job_id)
            if job is None or job.id in decided:
                continue
            if seen.lost:
                decided.add(job.id)
                orders.append(self._after_loss(deps, job, seen.attempt, facts.now, log))
            elif seen.agent is not None and seen.agent.notice is not None and seen.attempt.id not in log.ended:
                decided.add(job.id)
                orders.append(self._after_notice(deps, job, seen, facts.now, log))
        held = facts.held_jobs
        for job in facts.jobs.values():
            if job.id not in decided and (job.id not in held or job.spec.deadline is not None):
                orders.append(self._review(deps, facts, job, log))
        return [o for o in orders if o is not None]

    def _record_advisories(self, deps: EngineDeps, seen: Observed, now: datetime) -> None:
        """An advisory notice (the agent already asked the job for a checkpoint) is shown as an event, once per
        notice per attempt; it never ends the attempt (only ``AgentReport.notice`` does, in ``_after_notice``)."""
        if seen.agent is None:
            return
        attempt = seen.attempt
        for advisory in seen.agent.advisories:
            if (attempt.id, advisory.key) in self._advised:
                continue
            self._advised.add((attempt.id, advisory.key))
            deps.store.event(EventKind.ADVISORY_NOTICE,
                             f"{attempt.offer.provider} {attempt.instance_id or attempt.launch_id}: "
                             f"{advisory.describe()}; the job was asked to checkpoint now, the machine keeps "
                             "running", now, job_id=attempt.job_id,
                             data={"attempt_id": attempt.id, "kind": advisory.kind.value, "key": advisory.key})

    # --- a machine taken or going -------------------------------------------------------------------
    def _after_loss(self, deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, now: datetime,
                    log: TickLog) -> LaunchOrder | None:
        seen_at = deps.clock()
        if attempt.end_cause is EndCause.LOST:
            # An on-demand machine vanished: the job simply needs a machine again (not a spot preemption). It
            # counts as a relaunch all the same: the cap bounds a job whose machines keep vanishing.
            gang.end_others(deps, job, attempt, f"gang: node {attempt.node_rank} lost", now, log)
            fresh = deps.store.job(job.id)
            if fresh.relaunch_count >= fresh.spec.max_relaunches:
                return _capped(deps, fresh, now)
            deps.store.set_job_status(job.id, JobStatus.PENDING, now, relaunched=True)
            deps.store.event(EventKind.INSTANCE_LOST, f"{attempt.offer.provider} instance {attempt.instance_id} "
                             "disappeared; relaunching", now, job_id=job.id)
            return None
        what = "preempted" if attempt.end_cause is EndCause.PREEMPTED else "lost"
        gang.end_others(deps, job, attempt, f"gang node {attempt.node_rank} {what}", now, log)
        return self._after_preemption(deps, job, now, seen_at)

    def _after_notice(self, deps: EngineDeps, job: JobRecord, seen: Observed, now: datetime,
                      log: TickLog) -> LaunchOrder | None:
        seen_at = deps.clock()
        attempt, notice = seen.attempt, seen.agent.notice if seen.agent else None
        assert notice is not None
        drain: datetime | None = None
        if self._ends_at_notice(deps, job, attempt, now):
            why = f"preempted at its notice ({notice.describe()}): ended at once, still in its restart overhead"
            end_attempt(deps, attempt, AttemptState.PREEMPTED, EndCause.NOTICED, why, now, log)
        else:
            # The machine keeps running for the window so its agent can upload the notice checkpoint.
            drain = now + deps.config.notice_drain
            why = f"notice: {notice.describe()}"
            end_attempt(deps, attempt, AttemptState.PREEMPTED, EndCause.NOTICED, why, now, log, drain_until=drain)
        record_preemption(deps, attempt, why, now, log.report)
        gang.end_others(deps, job, attempt, f"{'notice: ' if drain else ''}gang node {attempt.node_rank} preempted",
                        now, log, drain_until=drain)
        return self._after_preemption(deps, job, now, seen_at)

    def _ends_at_notice(self, deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, now: datetime) -> bool:
        """Whether the policy ends a noticed single-node spot machine now rather than draining it."""
        if attempt.offer.market is not Market.SPOT or job.spec.plan.nodes != 1:
            return False
        decision = deps.hooks.recovery.decide(self.facts.context(deps, job, now, running=attempt, noticed=True))
        if decision.action is not RecoveryAction.END:
            return False
        deps.store.event(EventKind.NOTICE_END, decision.reason, now, job_id=job.id)
        return True

    def _after_preemption(self, deps: EngineDeps, job: JobRecord, now: datetime,
                          seen_at: datetime) -> LaunchOrder | None:
        fresh = deps.store.job(job.id)
        if fresh.relaunch_count >= fresh.spec.max_relaunches:
            return _capped(deps, fresh, now)
        decision = deps.hooks.recovery.decide(self.facts.context(deps, fresh, now))
        # The relaunch counts when it is decided, once per loss: a relaunch that finds no offer leaves the job
        # PENDING and its later launch is still this one (counted at the launch, it was never counted).
        deps.store.set_job_status(job.id, JobStatus.RECOVERING, now,
                                  relaunched=decision.action is RecoveryAction.RELAUNCH)
        if decision.action is RecoveryAction.GIVE_UP:
            deps.store.set_job_status(job.id, JobStatus.FAILED, now)
            deps.store.event(EventKind.GAVE_UP, decision.reason, now, job_id=job.id)
            return None
        if decision.action is RecoveryAction.WAIT:
            # No machine for now: the job stays RECOVERING and the policy is asked again every tick.
            deps.store.event(EventKind.WAITING, decision.reason, now, job_id=job.id)
            return None
        # A node ended past a liveness deadline keeps its place out too (the policy knows only preemptions).
        exclude = decision.exclude_places | cooled_places(deps.store.attempts_for_job(job.id), now, job.spec.cooldown)
        deps.store.event(EventKind.RECOVERING, decision.reason, now, job_id=job.id, data={"exclude": sorted(exclude)})
        return LaunchOrder(job.id, decision.markets, exclude, preemption_seen_at=seen_at)

    # --- every other active job ----------------------------------------------------------------------
    def _review(self, deps: EngineDeps, facts: TickFacts, job: JobRecord, log: TickLog) -> LaunchOrder | None:
        if job.id not in facts.held_jobs:
            status = job.status
            if status in (JobStatus.LAUNCHING, JobStatus.RUNNING):
                status = self._stranded(deps, job, facts.now)
            return self._decide_again(deps, job, facts.now) if status is JobStatus.RECOVERING else None
        spec = job.spec
        if spec.deadline is None or spec.plan.nodes != 1 or not spec.plan.estimated_hours:
            return None
        running = [o for o in facts.running(job.id)
                   if o.machine_running and o.attempt.offer.market is Market.SPOT and o.attempt.id not in log.ended]
        return self._deadline_review(deps, job, running[0].attempt, facts.now, log) if running else None

    def _stranded(self, deps: EngineDeps, job: JobRecord, now: datetime) -> JobStatus:
        """A launching or running job left with no machine: a crash between the sync (or a step's end of an
        attempt) and the decision that follows, or a re-asked launch refused. The causes its last machines
        ended with finish that decision: recover, fail, stop, succeed, or launch again."""
        attempts = deps.store.attempts_for_job(job.id)
        last = max((a.generation for a in attempts), default=0)
        causes = {a.end_cause for a in attempts if a.generation == last and a.end_cause}
        status = status_after(causes)
        # A lost machine needs one again, counted as ``_after_loss`` counts it (the cap holds across a crash).
        lost = status is JobStatus.PENDING and EndCause.LOST in causes
        if lost and job.relaunch_count >= job.spec.max_relaunches:
            _capped(deps, job, now)
            return JobStatus.FAILED
        deps.store.set_job_status(job.id, status, now, relaunched=lost)
        deps.store.event(EventKind.NO_MACHINE, f"{job.status.value} job has no machine left: {status.value}", now,
                         job_id=job.id)
        return status

    def _decide_again(self, deps: EngineDeps, job: JobRecord, now: datetime) -> LaunchOrder | None:
        """A RECOVERING job without a machine: the policy decides again with this tick's facts."""
        fresh = deps.store.job(job.id)
        if fresh.relaunch_count >= fresh.spec.max_relaunches:
            return _capped(deps, fresh, now)
        decision = deps.hooks.recovery.decide(self.facts.context(deps, fresh, now))
        if decision.action is RecoveryAction.WAIT:
            return None
        if decision.action is RecoveryAction.GIVE_UP:
            deps.store.set_job_status(job.id, JobStatus.FAILED, now)
            deps.store.event(EventKind.GAVE_UP, decision.reason, now, job_id=job.id)
            return None
        deps.store.set_job_status(job.id, JobStatus.RECOVERING, now, relaunched=True)
        deps.store.event(EventKind.RECOVERING, decision.reason, now, job_id=job.id)
        cooling = preempted_places(deps.store.attempts_for_job(job.id), now, job.spec.cooldown)
        return LaunchOrder(job.id, decision.markets, decision.exclude_places | cooling)

    def _deadline_review(self, deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, now: datetime,
                         log: TickLog) -> LaunchOrder | None:
        """A deadline approaching: whether a job running on spot moves to on-demand now (e.g. Uniform
        Progress's safety net)."""
        decision = deps.hooks.recovery.decide(self.facts.context(deps, job, now, running=attempt))
        if decision.action is not RecoveryAction.RELAUNCH:
            return None
        end_attempt(deps, attempt, AttemptState.TERMINATED, EndCause.DEADLINE_MOVE, f"deadline: {decision.reason}",
                    now, log)
        deps.store.set_job_status(job.id, JobStatus.RECOVERING, now)
        deps.store.event(EventKind.DEADLINE_MOVE, decision.reason, now, job_id=job.id)
        return LaunchOrder(job.id, decision.markets, decision.exclude_places)


def _capped(deps: EngineDeps, job: JobRecord, now: datetime) -> None:
    """The job has been relaunched ``max_relaunches`` times and lost its machine again: it fails (whatever the
    policy would say: the cap bounds what a job whose machines never come up can spend)."""
    deps.store.set_job_status(job.id, JobStatus.FAILED, now)
    deps.store.event(EventKind.RELAUNCH_CAP, f"max relaunches ({job.spec.max_relaunches}) reached: lost its machine "
                     f"again after {job.relaunch_count} relaunches; the job is failed", now, job_id=job.id,
                     data={"max_relaunches": job.spec.max_relaunches, "relaunch_count": job.relaunch_count})
