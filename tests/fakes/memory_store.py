"""An in-memory EngineStore for fast engine unit tests. The SQL store passes the same engine tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from orchestrator.engine.events import EventKind
from orchestrator.engine.jobspec import JobSpec
from orchestrator.engine.ports import AttemptRecord, FleetSpotRun, JobRecord
from orchestrator.engine.recovery_policy import SpotRun
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.engine.values import GpuUtilSample, RelaunchRequest
from orchestrator.manifest.schema import Manifest
from orchestrator.money.budget_launch import BudgetVerdict, RefusedLimits, refused_limits_from
from orchestrator.money.budgets import Budget, BudgetLedger, BudgetReview, JobFacts, alerted_from, month_label, review
from orchestrator.money.spend import reported_price_hr
from providers.base import Instance, Market, Offer
from tests.support.manifests import manifest_doc


def manifest_for(spec: JobSpec) -> Manifest:
    """A manifest with the spec's name and resources (the engine keeps one with every job; the spec's other
    fields, deadlines and the like, are the test's own)."""
    return Manifest.model_validate(manifest_doc(spec.name, gpus=list(spec.plan.gpus), count=spec.plan.count,
                                                nodes=spec.plan.nodes))


@dataclass
class Event:
    at: datetime
    kind: str
    message: str
    job_id: int | None
    data: dict[str, object] = field(default_factory=dict)


@dataclass
class MemoryStore:
    jobs: dict[int, JobRecord] = field(default_factory=dict)
    attempts: dict[int, AttemptRecord] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    checkpoints: dict[int, list[tuple[str, int | None]]] = field(default_factory=dict)
    instances: dict[tuple[str, str], Instance] = field(default_factory=dict)
    spend_marks: dict[int, datetime] = field(default_factory=dict)
    #: Every charge the spend step made: (attempt id, since, until, usd, $/h).
    charges: list[tuple[int, datetime, datetime, float, float]] = field(default_factory=list)
    gpu_util: list[GpuUtilSample] = field(default_factory=list)
    #: The engine's settling of its spend meters (``settle_before_reads``).
    settle: Callable[[], None] | None = None
    catalog: tuple[Offer, ...] = ()                 # what use_catalog was last given
    relaunch_requests_made: list[RelaunchRequest] = field(default_factory=list)
    #: How many times ``spot_history`` was read (the recovery reads it once per tick at most).
    history_reads: int = 0

    def add_job(self, spec: JobSpec, now: datetime) -> JobRecord:
        job = JobRecord(id=len(self.jobs) + 1, name=spec.name, manifest=manifest_for(spec), spec=spec,
                        status=JobStatus.PENDING, desired_active=True, relaunch_count=0, spent_usd=0.0,
                        created_at=now)
        self.jobs[job.id] = job
        return job

    def request_down(self, job_id: int) -> None:
        self.jobs[job_id] = replace(self.jobs[job_id], desired_active=False)

    # --- EngineStore ---------------------------------------------------------------------------------
    def begin_tick(self, now: datetime) -> None:
        return None

    def spend_mark(self, attempt_id: int) -> datetime | None:
        return self.spend_marks.get(attempt_id)

    def settle_before_reads(self, settle: Callable[[], None]) -> None:
        self.settle = settle

    def settled(self) -> None:
        """The engine's unsettled charges into this store (its reads of spend call it first, as the SQL store's)."""
        if self.settle is not None:
            self.settle()

    def active_jobs(self) -> Sequence[JobRecord]:
        return [j for j in self.jobs.values() if j.desired_active]

    def jobs_to_tear_down(self) -> Sequence[JobRecord]:
        return [j for j in self.jobs.values() if not j.desired_active and any(
            a.job_id == j.id and a.state.is_live for a in self.attempts.values())]

    def job(self, job_id: int) -> JobRecord:
        self.settled()
        return self.jobs[job_id]

    def live_attempts(self) -> Sequence[AttemptRecord]:
        return [a for a in self.attempts.values() if a.state.is_live]

    def draining_attempts(self, now: datetime) -> Sequence[AttemptRecord]:
        return [a for a in self.attempts.values() if a.drain_until is not None and a.drain_until > now]

    def all_live_launch_ids(self) -> set[str]:
        return {a.launch_id for a in self.attempts.values() if a.state.is_live}

    def attempts_for_job(self, job_id: int) -> Sequence[AttemptRecord]:
        return [a for a in self.attempts.values() if a.job_id == job_id]

    def attempt_by_launch_id(self, launch_id: str) -> AttemptRecord | None:
        return next((a for a in self.attempts.values() if a.launch_id == launch_id), None)

    def attempts_by_launch_ids(self, launch_ids: Sequence[str]) -> dict[str, AttemptRecord]:
        wanted = set(launch_ids)
        return {a.launch_id: a for a in self.attempts.values() if a.launch_id in wanted}

    def wanted_jobs(self, job_ids: Sequence[int]) -> set[int]:
        return {j for j in job_ids if j in self.jobs and self.jobs[j].desired_active}

    def spot_history(self, since: datetime) -> Sequence[FleetSpotRun]:
        self.history_reads += 1
        found = [FleetSpotRun(a.job_id, a.offer.gpu, SpotRun(
                     a.offer.zone or a.offer.region, a.started_at, a.ended_at,
                     preempted=a.state is AttemptState.PREEMPTED, noticed=a.end_cause is EndCause.NOTICED))
                 for a in self.attempts.values()
                 if a.offer.market is Market.SPOT and a.node_rank == 0 and a.started_at is not None
                 and (a.ended_at is None or a.ended_at >= since)]
        return sorted(found, key=lambda f: f.run.started_at)

    def observe_instances(self, provider: str, instances: Sequence[Instance], now: datetime) -> None:
        for inst in instances:
            self.instances[(provider, inst.instance_id)] = inst

    def plan_attempt(self, job_id: int, offer: Offer, launch_id: str, checkpoint: str | None,
                     now: datetime, *, node_rank: int = 0, generation: int | None = None) -> AttemptRecord:
        if generation is None:
            generation = max((a.generation for a in self.attempts.values() if a.job_id == job_id), default=0) + 1
        a = AttemptRecord(len(self.attempts) + 1, job_id, launch_id, AttemptState.PLANNED, offer, None, now,
                          checkpoint_restored=checkpoint, node_rank=node_rank, generation=generation,
                          launch_price_hr=offer.price_hr)
        self.attempts[a.id] = a
        return a

    def plan_attempt_within(self, job_id: int, offer: Offer, launch_ids: Sequence[str], checkpoint: str | None,
                            now: datetime, admit: Callable[[BudgetLedger], BudgetVerdict], *, node_rank: int = 0,
                            generation: int | None = None) -> list[AttemptRecord] | BudgetVerdict:
        verdict = admit(self.budget_ledger(now))      # one engine in one process: nothing interleaves
        if not verdict.allowed:
            return verdict
        head = self.plan_attempt(job_id, offer, launch_ids[0], checkpoint, now, node_rank=node_rank,
                                 generation=generation)
        return [head, *(self.plan_attempt(job_id, offer, lid, checkpoint, now, node_rank=rank,
                                          generation=head.generation)
                        for rank, lid in enumerate(launch_ids[1:], start=node_rank + 1))]

    def set_attempt_state(self, attempt_id: int, state: AttemptState, now: datetime, *,
                          instance: Instance | None = None, reason: str | None = None,
                          cause: EndCause | None = None, drain_until: datetime | None = None) -> None:
        a = self.attempts[attempt_id]
        if a.state.is_final and state is not a.state:
            raise ValueError(f"attempt {a.launch_id}: cannot go from {a.state.value} to {state.value}")
        changes: dict[str, object] = {"state": state}
        if instance is not None:
            changes["instance_id"] = instance.instance_id
            if reported_price_hr(instance.price_hr) is not None:
                changes["actual_price_hr"] = instance.price_hr
        if reason is not None:
            changes["reason"] = reason
        if cause is not None:
            changes["end_cause"] = cause
        if drain_until is not None:
            changes["drain_until"] = drain_until
        if state is AttemptState.RUNNING and a.started_at is None:
            changes["started_at"] = now
        if not state.is_live:
            changes["ended_at"] = now
        self.attempts[attempt_id] = replace(a, **changes)  # type: ignore[arg-type]

    def set_job_status(self, job_id: int, status: JobStatus, now: datetime, *, relaunched: bool = False) -> None:
        j = self.jobs[job_id]
        self.jobs[job_id] = replace(j, status=status, relaunch_count=j.relaunch_count + int(relaunched))

    def add_spend(self, job_id: int, attempt_id: int, usd: float, since: datetime, until: datetime, *,
                  price_hr: float) -> None:
        self.charges.append((attempt_id, since, until, usd, price_hr))
        j = self.jobs[job_id]
        self.jobs[job_id] = replace(j, spent_usd=j.spent_usd + usd)
        self.spend_marks[attempt_id] = until

    def last_checkpoint(self, job_id: int) -> str | None:
        found = self.checkpoints.get(job_id)
        return found[-1][0] if found else None

    def record_checkpoint(self, job_id: int, attempt_id: int, uri: str, step: int | None, at: datetime) -> None:
        found = self.checkpoints.setdefault(job_id, [])
        if (uri, step) not in found:
            found.append((uri, step))

    def note_liveness(self, attempt_id: int, *, heard_at: datetime | None, unreachable_since: datetime | None,
                      heard_beat: datetime | None = None) -> None:
        a = self.attempts[attempt_id]
        self.attempts[attempt_id] = replace(a, heard_at=heard_at, unreachable_since=unreachable_since,
                                            heard_beat=heard_beat)

    def event(self, kind: EventKind, message: str, now: datetime, *, job_id: int | None = None,
              data: dict[str, object] | None = None) -> None:
        self.events.append(Event(now, EventKind(kind), message, job_id, dict(data or {})))   # refuses a non-member

    def use_catalog(self, offers: Sequence[Offer]) -> None:
        self.catalog = tuple(offers)

    def record_gpu_util(self, samples: Sequence[GpuUtilSample]) -> None:
        self.gpu_util.extend(samples)

    def gpu_util_since(self, attempt_ids: Sequence[int], since: datetime) -> Sequence[GpuUtilSample]:
        wanted = set(attempt_ids)
        return [s for s in self.gpu_util if s.attempt_id in wanted and s.at >= since]

    def relaunch_requests(self, job_ids: Sequence[int]) -> Sequence[RelaunchRequest]:
        wanted = set(job_ids)
        return [r for r in self.relaunch_requests_made if r.taken_at is None and r.job_id in wanted]

    def take_relaunch_requests(self, now: datetime, job_ids: Sequence[int]) -> Sequence[RelaunchRequest]:
        wanted = set(job_ids)
        taken = [r for r in self.relaunch_requests_made if r.taken_at is None and r.job_id in wanted]
        self.relaunch_requests_made = [replace(r, taken_at=now) if r in taken else r
                                       for r in self.relaunch_requests_made]
        return taken

    def budget_ledger(self, now: datetime) -> BudgetLedger:
        """Each job's whole spend counts as this month's; burn: its live attempts' launch prices."""
        self.settled()
        burn: dict[int, float] = {}
        for a in self.attempts.values():
            if a.state.is_live:
                burn[a.job_id] = burn.get(a.job_id, 0.0) + (a.actual_price_hr or a.offer.price_hr)
        jobs = tuple(JobFacts(j.id, j.name, j.manifest.project, j.spent_usd, burn.get(j.id, 0.0))
                     for j in self.jobs.values())
        alerted = alerted_from([e.data for e in self.events if e.kind == EventKind.BUDGET_THRESHOLD], month_label(now))
        return BudgetLedger(now, jobs, alerted)

    def review_budgets(self, budgets: Sequence[Budget], now: datetime) -> BudgetReview:
        result = review(budgets, self.budget_ledger(now))
        for crossing in result.crossings:
            self.event(EventKind.BUDGET_THRESHOLD, crossing.message(), now, data=crossing.data())
        return result

    def last_refusal(self, job_id: int) -> RefusedLimits | None:
        refusals = [e for e in self.events if e.job_id == job_id and e.kind == EventKind.BUDGET_REFUSED]
        if not refusals:
            return None
        newest = refusals[-1]
        planned = [a.created_at for a in self.attempts.values() if a.job_id == job_id and a.created_at is not None]
        if planned and max(planned) >= newest.at:
            return None
        return refused_limits_from(newest.data)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def messages(self, kind: str) -> list[str]:
        return [e.message for e in self.events if e.kind == kind]
