"""The reconcile loop: make the clouds match the store, crash-safely.

Order of every tick (Karpenter / Ray v2 style): LIST THE CLOUDS FIRST, then compare with the store.

1. passive sync: each live attempt is matched to what its provider lists under its launch id —
   adopt (LAUNCH_REQUESTED + instance seen -> LAUNCHED), re-ask an idempotent launch for a request
   the cloud never saw (orch died just before calling), confirm terminations, notice preemptions;
2. active steps: launch jobs that want an instance (planner's cheapest eligible offer, the next one on
   capacity/quota errors), relaunch preempted jobs at once, tear down what was asked down, terminate
   tagged orphans the store does not know after a grace period, stop idle instances.

Every step that changes a cloud is written to the store before (LAUNCH_REQUESTED with the launch id,
TERMINATE_REQUESTED) and after (LAUNCHED with the instance id, TERMINATED once the cloud confirms), so
a process killed at any point resumes correctly: no duplicate launch (launch ids are idempotency
keys), no leaked instance (orphans are collected), no forgotten job (state lives in the store).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from orchestrator.clock import utcnow
from orchestrator.crashpoints import crashpoint
from orchestrator.engine.ports import AttemptRecord, AttemptState, EngineStore, JobRecord, JobStatus
from orchestrator.idle import IdleAction, UtilSample, idle_verdict
from orchestrator.observability import DaemonMetrics
from orchestrator.planner import gather_offers, plan
from orchestrator.recovery import DefaultRecoveryPolicy, Preemption, RecoveryAction, RecoveryContext, RecoveryPolicy
from orchestrator.spend import accrued_usd, would_break_budget
from providers.base import Capability, Instance, InstanceState, LaunchSpec, Market, Offer, Provider, new_launch_id
from providers.errors import MOVE_ON_ERRORS, InstanceNotFoundError, ProviderError

log = logging.getLogger("orch.reconcile")


@dataclass(frozen=True, slots=True)
class AgentReport:
    """What the monitor learned from an instance's agent (over SSH) this tick."""

    gpu_util_pct: tuple[float, ...] = ()
    notice: str | None = None                # a preemption notice the agent heard, with its source
    checkpoints: tuple[tuple[str, int | None], ...] = ()   # committed (uri, step), oldest first
    exit_code: int | None = None             # the job process ended with this code
    pending_uploads: int = 0                 # checkpoints complete on the machine, not yet in the store


class Monitor:
    """Reads an instance's agent. The default reads nothing (providers' own state still counts)."""

    def read(self, attempt: AttemptRecord, instance: Instance) -> AgentReport | None:
        return None


class Bootstrapper:
    """Starts the job on a freshly running instance (over SSH: agent + rendered script, detached).

    ``start`` returns True once the job is started (idempotent: a second call finds it running), False
    while the instance is not reachable yet (the next tick tries again). The default starts nothing:
    the provider's startup script (user data) does the work.
    """

    def start(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        return True


#: Renders the startup script for an attempt: (job, offer, checkpoint to restore) -> script text.
StartupRenderer = Callable[[JobRecord, Offer, str | None], str]


@dataclass
class EngineConfig:
    owner: str
    orphan_grace: timedelta = timedelta(minutes=10)
    #: After a preemption NOTICE the old machine keeps running so the agent can upload its checkpoint;
    #: orch ends it after this long if the cloud has not reclaimed it by then.
    notice_drain: timedelta = timedelta(minutes=2)
    ssh_public_key: str = ""
    use_live_offers: bool = False


@dataclass
class TickReport:
    launched: int = 0
    adopted: int = 0
    preempted: int = 0
    relaunched: int = 0
    terminated: int = 0
    orphans_terminated: int = 0
    idle_stopped: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def quiet(self) -> bool:
        """Nothing changed: the clouds and the store agree."""
        return not (self.launched or self.adopted or self.preempted or self.relaunched or self.terminated
                    or self.orphans_terminated or self.idle_stopped)


class Reconciler:
    def __init__(
        self,
        store: EngineStore,
        providers: Mapping[str, Provider],
        catalog: Sequence[Offer],
        config: EngineConfig,
        *,
        clock: Callable[[], datetime] = utcnow,
        monitor: Monitor | None = None,
        bootstrapper: Bootstrapper | None = None,
        recovery: RecoveryPolicy | None = None,
        render_startup: StartupRenderer | None = None,
        metrics: DaemonMetrics | None = None,
    ) -> None:
        self.store = store
        self.providers = dict(providers)
        self.catalog = list(catalog)
        self.config = config
        self.clock = clock
        self.monitor = monitor or Monitor()
        self.bootstrapper = bootstrapper or Bootstrapper()
        self.recovery = recovery or DefaultRecoveryPolicy()
        self.render_startup = render_startup or (lambda job, offer, ckpt: "")
        self.metrics = metrics
        self._orphans_seen: dict[tuple[str, str], datetime] = {}
        self._samples: dict[int, list[UtilSample]] = {}
        self._spend_marks: dict[int, datetime] = {}
        self._asked_to_end: set[tuple[str, str]] = set()
        # Per tick: attempts a gang decision ended (their records read at the tick's start are stale), and
        # the node-0 instances of multi-node gangs that are up (their ranks > 0 rendezvous with them).
        self._ended: set[int] = set()
        self._by_launch: dict[str, Instance] = {}
        self._masters: dict[tuple[int, int], Instance] = {}
        self._gang_running: dict[tuple[int, int], set[int]] = {}
        self._spot_facts_cache: dict[int, tuple[tuple[str, ...], float | None]] = {}

    # ------------------------------------------------------------------------------------------------
    def tick(self) -> TickReport:
        report = TickReport()
        now = self.clock()
        self.store.begin_tick(now)
        listed, failed = self._list_clouds(report)
        by_launch: dict[str, Instance] = {}
        for instances in listed.values():
            for inst in instances:
                if inst.launch_id:
                    prev = by_launch.get(inst.launch_id)
                    # A terminated row may linger beside a live one with the same launch id: prefer live.
                    if prev is None or (prev.state.is_gone and not inst.state.is_gone):
                        by_launch[inst.launch_id] = inst
        jobs = {j.id: j for j in self.store.active_jobs()}
        live = self.store.live_attempts()
        self._ended = set()
        self._by_launch = by_launch
        self._masters = {}
        self._gang_running = {}
        for attempt in live:
            if attempt.state is AttemptState.RUNNING:
                self._gang_running.setdefault((attempt.job_id, attempt.generation), set()).add(attempt.node_rank)
                inst = by_launch.get(attempt.launch_id)
                if attempt.node_rank == 0 and inst is not None:
                    self._masters[(attempt.job_id, attempt.generation)] = inst
        for attempt in live:
            if attempt.offer.provider in failed or attempt.offer.provider not in self.providers:
                continue
            if attempt.id in self._ended:
                continue
            self._sync_attempt(attempt, by_launch.get(attempt.launch_id), jobs, now, report)
        for name, instances in listed.items():
            self.store.observe_instances(name, instances, now)
        self._tear_down(now, report)
        self._sweep_unowned(listed, now, report)
        self._launch_pending(now, report)
        self._publish_metrics(listed)
        return report

    # --- 1. the clouds first -------------------------------------------------------------------------
    def _list_clouds(self, report: TickReport) -> tuple[dict[str, list[Instance]], set[str]]:
        listed: dict[str, list[Instance]] = {}
        failed: set[str] = set()
        for name, provider in self.providers.items():
            try:
                listed[name] = provider.list_instances(self.config.owner)
            except ProviderError as exc:
                # An unlistable cloud is NOT an empty cloud: skip its attempts this tick.
                failed.add(name)
                report.errors.append(f"{name}: list failed: {exc}")
        return listed, failed

    # --- 2. passive sync per attempt -----------------------------------------------------------------
    def _sync_attempt(self, attempt: AttemptRecord, inst: Instance | None, jobs: Mapping[int, JobRecord],
                      now: datetime, report: TickReport) -> None:
        job = jobs.get(attempt.job_id) or self.store.job(attempt.job_id)
        provider = self.providers[attempt.offer.provider]
        if attempt.state is AttemptState.TERMINATE_REQUESTED:
            if inst is None or inst.state is InstanceState.TERMINATED or inst.state.is_gone:
                self._accrue(attempt, job, now)
                self.store.set_attempt_state(attempt.id, AttemptState.TERMINATED, now, reason="confirmed gone")
                report.terminated += 1
            elif attempt.instance_id:
                self._terminate(provider, attempt.instance_id, report)
            return
        if attempt.state in (AttemptState.PLANNED, AttemptState.LAUNCH_REQUESTED):
            if inst is not None and not inst.state.is_gone:
                self.store.set_attempt_state(attempt.id, AttemptState.LAUNCHED, now, instance=inst)
                self.store.event("adopted", f"adopted {inst.provider} {inst.instance_id} for launch "
                                 f"{attempt.launch_id}", now, job_id=attempt.job_id)
                report.adopted += 1
                return
            # The cloud never saw it (orch died before asking): ask again with the SAME launch id.
            self._request_launch(job, attempt, now, report)
            return
        # LAUNCHED / RUNNING
        if inst is None or inst.state is InstanceState.TERMINATED:
            self._accrue(attempt, job, now)
            if attempt.offer.market is Market.SPOT:
                self._on_preempted(job, attempt, inst, "instance gone" if inst is None else
                                   (inst.raw_reason or inst.raw_state or "terminated"), now, report)
            else:
                self.store.set_attempt_state(attempt.id, AttemptState.FAILED, now,
                                             reason="instance disappeared")
                self.store.set_job_status(job.id, JobStatus.PENDING, now)
                self.store.event("instance-lost", f"{attempt.offer.provider} instance {attempt.instance_id} "
                                 "disappeared; relaunching", now, job_id=job.id)
            return
        if inst.state is InstanceState.PREEMPTED:
            self._accrue(attempt, job, now)
            self._on_preempted(job, attempt, inst, inst.raw_reason or inst.raw_state, now, report)
            return
        if inst.state is InstanceState.RUNNING:
            if attempt.state is AttemptState.LAUNCHED:
                if self._predecessor_draining(job, attempt, now):
                    return
                gang_key = (attempt.job_id, attempt.generation)
                if attempt.node_rank > 0:
                    # Node 0 starts first: it hosts the rendezvous the other nodes join.
                    master = self._masters.get(gang_key)
                    if master is None:
                        return
                    attempt = replace(attempt, master_addr=master.private_ip or master.public_ip or "127.0.0.1",
                                      master_key=f"{master.provider}/{master.instance_id}")
                try:
                    started = self.bootstrapper.start(job, attempt, inst)
                except Exception as exc:  # a bootstrap bug must not stop the tick for other jobs
                    log.exception("bootstrap failed")
                    report.errors.append(f"bootstrap {attempt.launch_id}: {exc}")
                    started = False
                if not started:
                    return
                self.store.set_attempt_state(attempt.id, AttemptState.RUNNING, now, instance=inst)
                if attempt.node_rank == 0:
                    self._masters[gang_key] = inst
                up = self._gang_running.setdefault(gang_key, set())
                up.add(attempt.node_rank)
                nodes = job.spec.plan.nodes
                if len(up) >= nodes:
                    self.store.set_job_status(job.id, JobStatus.RUNNING, now)
                    where = f"{inst.provider} {inst.instance_id}" if nodes == 1 else f"{nodes} nodes on {inst.provider}"
                    self.store.event("started", f"job running on {where}", now, job_id=job.id)
                else:
                    self.store.event("node-started", f"node {attempt.node_rank} of {nodes} running on "
                                     f"{inst.provider} {inst.instance_id}", now, job_id=job.id)
            self._accrue(attempt, job, now)
            self._watch(job, replace(attempt, state=AttemptState.RUNNING), inst, now, report)

    def _predecessor_draining(self, job: JobRecord, attempt: AttemptRecord, now: datetime) -> bool:
        """Whether a noticed machine of this job is still uploading its notice checkpoint: then the
        replacement (launched at once, so it boots meanwhile) starts its job only once that machine's
        agent has committed and stopped, is unreachable, or ``notice_drain`` is over. It then restores the
        notice checkpoint, not an older one, and one machine at a time writes the store."""
        if job.relaunch_count == 0:
            return False
        for prev in self.store.attempts_for_job(job.id):
            if (prev.generation >= attempt.generation or not (prev.reason or "").startswith("notice")
                    or prev.ended_at is None or now - prev.ended_at >= self.config.notice_drain):
                continue
            inst = self._by_launch.get(prev.launch_id)
            if inst is None or inst.state.is_gone or inst.state is InstanceState.TERMINATED:
                continue
            report = self.monitor.read(prev, inst)
            if report is None or (report.exit_code is not None and report.pending_uploads == 0):
                if report is not None:
                    for uri, step in report.checkpoints:
                        self.store.record_checkpoint(job.id, prev.id, uri, step, now)
                continue
            return True
        return False

    def _watch(self, job: JobRecord, attempt: AttemptRecord, inst: Instance, now: datetime,
               report: TickReport) -> None:
        agent = self.monitor.read(attempt, inst)
        if agent is not None:
            for uri, step in agent.checkpoints:
                self.store.record_checkpoint(job.id, attempt.id, uri, step, now)
            if agent.gpu_util_pct:
                samples = self._samples.setdefault(attempt.id, [])
                samples.append(UtilSample(now, agent.gpu_util_pct))
                horizon = now - job.spec.idle.window - timedelta(minutes=5)
                self._samples[attempt.id] = [s for s in samples if s.at >= horizon]
            # A job stopped after its notice checkpoint (the agent drains a noticed machine) was preempted,
            # not failed; one that finished during the notice window succeeded.
            if agent.exit_code is not None and (agent.exit_code == 0 or not agent.notice):
                ok = agent.exit_code == 0
                self._end_attempt(attempt, inst, AttemptState.SUCCEEDED if ok else AttemptState.FAILED,
                                  f"job exited {agent.exit_code}", now, report)
                if not ok:
                    self._end_gang(job, attempt, f"gang: node {attempt.node_rank} failed", now, report)
                    self.store.set_job_status(job.id, JobStatus.FAILED, now)
                elif not self._gang_live(job, attempt):
                    # A multi-node job has succeeded once every node's process has exited 0.
                    self.store.set_job_status(job.id, JobStatus.SUCCEEDED, now)
                return
            if agent.notice:
                # Act on the cloud's own notice: the replacement starts during the notice window. A machine
                # the recovery policy says can save nothing before it goes (still in its restart overhead) is
                # ended at once instead of drained: no bill for the window, no wait for the replacement.
                if self._end_at_notice(job, attempt, now):
                    self._on_preempted(job, attempt, inst, f"preempted at its notice ({agent.notice}): ended at "
                                       "once, still in its restart overhead", now, report)
                    return
                self._on_preempted(job, attempt, inst, f"notice: {agent.notice}", now, report)
                return
        if (attempt.offer.market is Market.SPOT and job.spec.deadline is not None and job.spec.plan.nodes == 1
                and job.spec.plan.estimated_hours):
            self._review_spot(job, attempt, inst, now, report)
            if attempt.id in self._ended or self.store.job(job.id).status is not JobStatus.RUNNING:
                return
        verdict = idle_verdict(self._samples.get(attempt.id, ()), job.spec.idle, now)
        if verdict.idle:
            action = job.spec.idle.action
            provider = self.providers[attempt.offer.provider]
            if action is IdleAction.STOP and Capability.STOP in provider.capabilities:
                try:
                    provider.stop(inst.instance_id)
                except ProviderError as exc:
                    report.errors.append(f"stop {inst.instance_id}: {exc}")
                    return
                self.store.set_attempt_state(attempt.id, AttemptState.TERMINATED, now, reason="idle: stopped")
            else:
                self._end_attempt(attempt, inst, AttemptState.TERMINATED, f"idle: {verdict.reason}", now, report)
            self._end_gang(job, attempt, f"idle: gang node {attempt.node_rank} idle", now, report)
            self.store.set_job_status(job.id, JobStatus.STOPPED, now)
            self.store.event("idle-shutdown", f"{action.value} {inst.provider} {inst.instance_id}: {verdict.reason}",
                             now, job_id=job.id)
            report.idle_stopped += 1
            if self.metrics:
                self.metrics.idle_shutdowns.labels(action.value).inc()

    # --- recovery ------------------------------------------------------------------------------------
    def _on_preempted(self, job: JobRecord, attempt: AttemptRecord, inst: Instance | None, reason: str,
                      now: datetime, report: TickReport) -> None:
        noticed_at = self.clock()
        self.store.set_attempt_state(attempt.id, AttemptState.PREEMPTED, now, reason=reason)
        self.store.set_job_status(job.id, JobStatus.RECOVERING, now)
        self.store.event("preempted", f"{attempt.offer.provider} {attempt.instance_id} preempted ({reason})", now,
                         job_id=job.id, data={"zone": attempt.offer.zone, "region": attempt.offer.region})
        report.preempted += 1
        if self.metrics:
            self.metrics.preemptions.labels(attempt.offer.provider).inc()
        # A reclaimed machine that still exists (Vast outbid -> stopped, Azure deallocated) still bills: end
        # it. One only NOTICED keeps running for the notice window so its checkpoint can upload; the sweep
        # ends it after ``notice_drain``.
        noticed = reason.startswith("notice")
        if inst is not None and inst.state is not InstanceState.TERMINATED and not noticed:
            self._terminate(self.providers[attempt.offer.provider], inst.instance_id, report)
        # A multi-node job restarts as a whole: its other nodes end too (after the drain, on a notice, so
        # whichever node writes the checkpoint can still upload it).
        self._end_gang(job, attempt, f"{'notice: ' if noticed else ''}gang node {attempt.node_rank} preempted",
                       now, report, drain=noticed)
        history = [a for a in self.store.attempts_for_job(job.id) if a.state is AttemptState.PREEMPTED]
        preemptions = [Preemption(a.ended_at or now, a.offer.provider, a.offer.zone, a.offer.region)
                       for a in history]
        if not any(a.id == attempt.id for a in history):
            preemptions.append(Preemption(now, attempt.offer.provider, attempt.offer.zone, attempt.offer.region))
        fresh = self.store.job(job.id)
        decision = self.recovery.decide(self._recovery_context(fresh, now, preemptions=preemptions))
        if decision.action is RecoveryAction.GIVE_UP:
            self.store.set_job_status(job.id, JobStatus.FAILED, now)
            self.store.event("gave-up", decision.reason, now, job_id=job.id)
            return
        if decision.action is RecoveryAction.WAIT:
            # No machine for now: the job stays RECOVERING and the policy is asked again every tick.
            self.store.event("waiting", decision.reason, now, job_id=job.id)
            return
        self.store.event("recovering", decision.reason, now, job_id=job.id,
                         data={"exclude": sorted(decision.exclude_places)})
        launched = self._launch_job(fresh, now, report, exclude=decision.exclude_places, markets=decision.markets,
                                    relaunch=True)
        if launched is not None:
            report.relaunched += 1
            if self.metrics:
                self.metrics.relaunch_latency.observe((self.clock() - noticed_at).total_seconds())

    def _recovery_context(self, job: JobRecord, now: datetime, *, preemptions: Sequence[Preemption] | None = None,
                          running: AttemptRecord | None = None) -> RecoveryContext:
        """The facts a recovery policy decides on, from the store (and the catalog, for the spot places)."""
        spec = job.spec
        attempts = self.store.attempts_for_job(job.id)
        if preemptions is None:
            preemptions = [Preemption(a.ended_at or now, a.offer.provider, a.offer.zone, a.offer.region)
                           for a in attempts if a.state is AttemptState.PREEMPTED]
        running_h = sum(((a.ended_at or now) - a.started_at).total_seconds() / 3600
                        for a in attempts if a.started_at is not None and a.node_rank == 0)
        estimate = spec.plan.estimated_hours
        places, ratio = self._spot_facts(job)
        return RecoveryContext(
            now=now, relaunch_count=job.relaunch_count, max_relaunches=spec.max_relaunches,
            markets=spec.plan.markets, preemptions=preemptions, cooldown=spec.cooldown, spent_usd=job.spent_usd,
            budget_usd=spec.budget_usd, deadline=spec.deadline,
            remaining_hours=None if estimate is None else max(estimate - running_h, 0.0),
            estimated_hours=estimate, started_at=job.created_at, running_hours=running_h,
            on_spot=True if running is not None else None,
            current_place=(running.offer.zone or running.offer.region) if running is not None else None,
            current_age_hours=((now - running.started_at).total_seconds() / 3600
                               if running is not None and running.started_at is not None else 0.0),
            spot_places=places, spot_price_ratio=ratio,
        )

    def _spot_facts(self, job: JobRecord) -> tuple[tuple[str, ...], float | None]:
        """The places (zone, else region) of the job's eligible spot offers in the catalog, and the cheapest
        spot over the cheapest on-demand $/h (cached per job: the catalog does not change under the engine)."""
        found = self._spot_facts_cache.get(job.id)
        if found is None:
            req = replace(job.spec.plan, markets=frozenset(Market))
            offers = [c.offer for c in plan(req, gather_offers(req.gpu_request(), self.catalog, [])).eligible
                      if c.offer.provider in self.providers]
            spot = [o for o in offers if o.market is Market.SPOT]
            od = [o.price_hr for o in offers if o.market is Market.ON_DEMAND]
            places = tuple(dict.fromkeys(o.zone or o.region for o in spot))
            ratio = min(o.price_hr for o in spot) / min(od) if spot and od and min(od) > 0 else None
            found = self._spot_facts_cache[job.id] = (places, ratio)
        return found

    def _end_at_notice(self, job: JobRecord, attempt: AttemptRecord, now: datetime) -> bool:
        """Whether the recovery policy ends a noticed single-node spot machine now rather than draining it."""
        if attempt.offer.market is not Market.SPOT or job.spec.plan.nodes != 1:
            return False
        ctx = replace(self._recovery_context(job, now, running=attempt), noticed=True,
                      notice_window_hours=self.config.notice_drain.total_seconds() / 3600)
        decision = self.recovery.decide(ctx)
        if decision.action is not RecoveryAction.END:
            return False
        self.store.event("notice-end", decision.reason, now, job_id=job.id)
        return True

    def _review_spot(self, job: JobRecord, attempt: AttemptRecord, inst: Instance, now: datetime,
                     report: TickReport) -> None:
        """A deadline approaching: ask the recovery policy whether a job running on spot should move to
        on-demand now (e.g. Uniform Progress's safety net). Single-node jobs with a deadline and an estimate."""
        decision = self.recovery.decide(self._recovery_context(job, now, running=attempt))
        if decision.action is not RecoveryAction.RELAUNCH:
            return
        self._end_attempt(attempt, inst, AttemptState.TERMINATED, f"deadline: {decision.reason}", now, report)
        self.store.set_job_status(job.id, JobStatus.RECOVERING, now)
        self.store.event("deadline-move", decision.reason, now, job_id=job.id)
        self._launch_job(self.store.job(job.id), now, report, markets=decision.markets,
                         exclude=decision.exclude_places)

    # --- 3. active steps -----------------------------------------------------------------------------
    def _launch_pending(self, now: datetime, report: TickReport) -> None:
        live_by_job: dict[int, list[AttemptRecord]] = {}
        for a in self.store.live_attempts():
            live_by_job.setdefault(a.job_id, []).append(a)
        for job in self.store.active_jobs():
            live = live_by_job.get(job.id)
            if live:
                if job.spec.plan.nodes > 1 and job.status in (JobStatus.LAUNCHING, JobStatus.RECOVERING):
                    self._complete_gang(job, live, now, report)
                continue
            if job.status not in (JobStatus.PENDING, JobStatus.RECOVERING):
                continue
            if job.status is JobStatus.RECOVERING:
                # Told to WAIT after a preemption: the policy decides again with this tick's facts.
                decision = self.recovery.decide(self._recovery_context(job, now))
                if decision.action is RecoveryAction.WAIT:
                    continue
                if decision.action is RecoveryAction.GIVE_UP:
                    self.store.set_job_status(job.id, JobStatus.FAILED, now)
                    self.store.event("gave-up", decision.reason, now, job_id=job.id)
                    continue
                self.store.event("recovering", decision.reason, now, job_id=job.id)
                self._launch_job(job, now, report, relaunch=True, markets=decision.markets,
                                 exclude=decision.exclude_places | self._cooling_places(job, now))
                continue
            # FIX (daemon branch): a job whose relaunch failed comes back here PENDING; it must still keep
            # its preempted zones out for the cool-down (tests/test_daemon.py proves it was re-chosen).
            self._launch_job(job, now, report, relaunch=job.status is JobStatus.RECOVERING,
                             exclude=self._cooling_places(job, now))

    def _cooling_places(self, job: JobRecord, now: datetime) -> frozenset[str]:
        """Zones (or regions) where this job was preempted within its cool-down."""
        if job.relaunch_count == 0 and job.status is JobStatus.PENDING:
            return frozenset()   # never preempted: no history to read (keeps a steady tick query-free)
        return frozenset(a.offer.zone or a.offer.region for a in self.store.attempts_for_job(job.id)
                         if a.state is AttemptState.PREEMPTED and now - (a.ended_at or now) < job.spec.cooldown)

    def _launch_job(self, job: JobRecord, now: datetime, report: TickReport, *,
                    exclude: frozenset[str] = frozenset(), markets: frozenset[Market] | None = None,
                    relaunch: bool = False) -> AttemptRecord | None:
        """Try eligible offers cheapest first; move on after capacity/quota errors. Returns the attempt."""
        # Only configured providers can launch; an allow list none of which is configured means no offer
        # (an empty allow list would mean "any provider").
        usable = tuple(p for p in (job.spec.plan.providers_allow or self.providers) if p in self.providers)
        if not usable:
            self.store.set_job_status(job.id, JobStatus.PENDING, now)
            self.store.event("no-offer", "none of the job's allowed providers is configured", now, job_id=job.id)
            return None
        req = replace(job.spec.plan, exclude_zones=job.spec.plan.exclude_zones | exclude,
                      markets=markets or job.spec.plan.markets, providers_allow=usable)
        live = [p for p in self.providers.values()
                if self.config.use_live_offers and Capability.LIVE_OFFERS in p.capabilities]
        the_plan = plan(req, gather_offers(req.gpu_request(), self.catalog, live))
        candidates = [c for c in the_plan.eligible if job.spec.plan.nodes == 1
                      or Capability.MULTI_NODE in self.providers[c.offer.provider].capabilities]
        eligible = [c.offer for c in candidates]
        checkpoint = self.store.last_checkpoint(job.id)
        hours = job.spec.plan.estimated_hours or 1.0
        refused: list[str] = []
        for candidate in candidates:
            offer = candidate.offer
            if would_break_budget(job.spent_usd, candidate.total_price_hr, hours, job.spec.budget_usd):
                refused.append(f"{offer.provider}/{offer.instance_type} ${candidate.total_price_hr:.2f}/h")
                continue
            attempt = self.store.plan_attempt(job.id, offer, new_launch_id(), checkpoint, now)
            self.store.set_job_status(job.id, JobStatus.LAUNCHING, now, relaunched=relaunch)
            relaunch = False  # counted once per recovery, not per offer tried
            if job.spec.plan.nodes > 1:
                if self._launch_gang(job, attempt, eligible, now, report):
                    return attempt
                continue
            if self._request_launch(job, attempt, now, report):
                return attempt
        if refused:
            self.store.event("budget-refused", f"launch refused: would break the budget ${job.spec.budget_usd:.2f} "
                             f"({', '.join(refused[:3])})", now, job_id=job.id)
        self.store.set_job_status(job.id, JobStatus.PENDING, now)
        if not the_plan.eligible:
            self.store.event("no-offer", "no eligible offer for the job's constraints", now, job_id=job.id)
        return None

    # --- multi-node gangs ------------------------------------------------------------------------------
    def _gang_offers(self, first: Offer, eligible: Sequence[Offer]) -> list[Offer]:
        """Where a gang's other nodes may go: node 0's offer first, then the eligible offers of the same
        provider, region, GPU and count (one site, so the nodes share a fast network), cheapest first."""
        same = [o for o in eligible if o != first and o.provider == first.provider and o.region == first.region
                and o.gpu == first.gpu and o.gpu_count == first.gpu_count]
        return [first, *same]

    def _launch_gang(self, job: JobRecord, first: AttemptRecord, eligible: Sequence[Offer], now: datetime,
                     report: TickReport) -> bool:
        """Launch node 0 (``first``, already PLANNED) and nodes 1..N-1 of its generation. All ranks are
        written PLANNED before any cloud call, so a crash leaves the whole gang for the next tick to re-ask.
        A rank the cloud refuses tries the next same-site offer; if none takes it the gang is ended."""
        nodes = job.spec.plan.nodes
        planned = [first, *(self.store.plan_attempt(job.id, first.offer, new_launch_id(), first.checkpoint_restored,
                                                    now, node_rank=r, generation=first.generation)
                            for r in range(1, nodes))]
        if not self._request_launch(job, first, now, report):
            self._abort_gang(job, first, "node 0 could not launch", now, report)
            return False
        for attempt in planned[1:]:
            if not self._launch_rank(job, attempt, self._gang_offers(first.offer, eligible), now, report):
                self._abort_gang(job, first, f"node {attempt.node_rank} found no capacity beside node 0", now, report)
                return False
        return True

    def _launch_rank(self, job: JobRecord, attempt: AttemptRecord, offers: Sequence[Offer], now: datetime,
                     report: TickReport) -> bool:
        """Launch one rank of a gang: its planned offer, then each other offer of the site."""
        if self._request_launch(job, attempt, now, report):
            return True
        for offer in offers:
            if offer == attempt.offer:
                continue
            retry = self.store.plan_attempt(job.id, offer, new_launch_id(), attempt.checkpoint_restored, now,
                                            node_rank=attempt.node_rank, generation=attempt.generation)
            if self._request_launch(job, retry, now, report):
                return True
        return False

    def _gang_live(self, job: JobRecord, attempt: AttemptRecord) -> list[AttemptRecord]:
        """The other live attempts of ``attempt``'s gang (fresh from the store)."""
        if job.spec.plan.nodes <= 1:
            return []
        return [a for a in self.store.attempts_for_job(job.id)
                if a.generation == attempt.generation and a.id != attempt.id and a.state.is_live
                and a.id not in self._ended]

    def _end_gang(self, job: JobRecord, attempt: AttemptRecord, reason: str, now: datetime, report: TickReport,
                  *, drain: bool = False) -> None:
        """End every other live node of ``attempt``'s gang. ``drain``: leave their machines running for the
        notice drain (the sweep ends them), as for a noticed node; otherwise terminate them now."""
        for other in self._gang_live(job, attempt):
            self._ended.add(other.id)
            self._accrue(other, job, now)
            if drain and other.instance_id:
                self.store.set_attempt_state(other.id, AttemptState.TERMINATED, now, reason=reason)
                continue
            self.store.set_attempt_state(other.id, AttemptState.TERMINATE_REQUESTED, now, reason=reason)
            provider = self.providers.get(other.offer.provider)
            if other.instance_id and provider is not None:
                self._terminate(provider, other.instance_id, report)
            else:
                # Never launched, or the cloud may still be creating it: the sweep ends what shows up.
                self.store.set_attempt_state(other.id, AttemptState.TERMINATED, now, reason=reason)

    def _abort_gang(self, job: JobRecord, attempt: AttemptRecord, reason: str, now: datetime,
                    report: TickReport) -> None:
        """End a gang that cannot be completed: its other nodes, then ``attempt`` itself."""
        self._end_gang(job, attempt, f"gang: {reason}", now, report)
        fresh = self.store.attempt_by_launch_id(attempt.launch_id)
        if fresh is not None and fresh.state.is_live:
            self._ended.add(fresh.id)
            self.store.set_attempt_state(fresh.id, AttemptState.TERMINATE_REQUESTED, now, reason=f"gang: {reason}")
            if fresh.instance_id:
                self._terminate(self.providers[fresh.offer.provider], fresh.instance_id, report)
            else:
                self.store.set_attempt_state(fresh.id, AttemptState.TERMINATED, now, reason=f"gang: {reason}")
        self.store.event("gang-aborted", f"multi-node launch abandoned: {reason}", now, job_id=job.id)

    def _complete_gang(self, job: JobRecord, live: Sequence[AttemptRecord], now: datetime,
                       report: TickReport) -> None:
        """After a crash between planning a gang's ranks: plan the missing ranks beside node 0, or end the
        gang when a rank was refused for good (the job then plans a new gang)."""
        generation = max(a.generation for a in live)
        gang = [a for a in live if a.generation == generation]
        if len(gang) >= job.spec.plan.nodes:
            return
        have = {a.node_rank for a in gang}
        head = next((a for a in gang if a.node_rank == 0), None)
        if head is None:
            self._abort_gang(job, gang[0], "node 0 is gone", now, report)
            self.store.set_job_status(job.id, JobStatus.PENDING, now)
            return
        for rank in range(job.spec.plan.nodes):
            if rank in have:
                continue
            attempt = self.store.plan_attempt(job.id, head.offer, new_launch_id(), head.checkpoint_restored, now,
                                              node_rank=rank, generation=generation)
            if not self._request_launch(job, attempt, now, report):
                self._abort_gang(job, head, f"node {rank} could not launch", now, report)
                self.store.set_job_status(job.id, JobStatus.PENDING, now)
                return

    def _request_launch(self, job: JobRecord, attempt: AttemptRecord, now: datetime, report: TickReport) -> bool:
        provider = self.providers[attempt.offer.provider]
        self.store.set_attempt_state(attempt.id, AttemptState.LAUNCH_REQUESTED, now)
        crashpoint("before-launch-call")
        spec = LaunchSpec(
            launch_id=attempt.launch_id, owner=self.config.owner, job=job.name, offer=attempt.offer,
            ssh_public_key=self.config.ssh_public_key,
            startup_script=self.render_startup(job, attempt.offer, attempt.checkpoint_restored),
            image=job.spec.image, disk_gb=job.spec.disk_gb, max_price_hr=job.spec.max_price_hr,
            node_rank=attempt.node_rank,
        )
        try:
            inst = provider.launch(spec)
        except MOVE_ON_ERRORS as exc:
            self.store.set_attempt_state(attempt.id, AttemptState.FAILED, now, reason=type(exc).__name__)
            self.store.event("launch-refused", f"{provider.name} {attempt.offer.instance_type} "
                             f"{attempt.offer.region}: {exc}; trying the next offer", now, job_id=job.id)
            return False
        except ProviderError as exc:
            # Ambiguous failure: the cloud may have created it anyway. Leave nothing behind.
            self._clean_up_launch(provider, attempt.launch_id, report)
            self.store.set_attempt_state(attempt.id, AttemptState.FAILED, now, reason=str(exc)[:300])
            self.store.event("launch-failed", f"{provider.name}: {exc}", now, job_id=job.id)
            report.errors.append(f"launch {attempt.launch_id}: {exc}")
            return False
        crashpoint("after-launch-call")
        self.store.set_attempt_state(attempt.id, AttemptState.LAUNCHED, now, instance=inst)
        crashpoint("after-launched-written")
        self.store.event("launched", f"{provider.name} {inst.instance_id} ({attempt.offer.instance_type}, "
                         f"{attempt.offer.market.value}, ${attempt.offer.price_hr:.2f}/h) launch {attempt.launch_id}",
                         now, job_id=job.id)
        report.launched += 1
        return True

    def _clean_up_launch(self, provider: Provider, launch_id: str, report: TickReport) -> None:
        try:
            for inst in provider.list_instances(self.config.owner):
                if inst.launch_id == launch_id and not inst.state.is_gone:
                    self._terminate(provider, inst.instance_id, report)
        except ProviderError as exc:
            report.errors.append(f"cleanup {launch_id}: {exc} (the orphan collector will retry)")

    def _tear_down(self, now: datetime, report: TickReport) -> None:
        for job in self.store.jobs_to_tear_down():
            for attempt in self.store.attempts_for_job(job.id):
                if not attempt.state.is_live or attempt.state is AttemptState.TERMINATE_REQUESTED:
                    continue
                provider = self.providers.get(attempt.offer.provider)
                if provider is None:
                    continue
                self.store.set_attempt_state(attempt.id, AttemptState.TERMINATE_REQUESTED, now, reason="down")
                crashpoint("after-terminate-requested")
                if attempt.instance_id:
                    self._terminate(provider, attempt.instance_id, report)
                report.terminated += 1
            if job.status is not JobStatus.STOPPED:
                self.store.set_job_status(job.id, JobStatus.STOPPED, now)

    def _end_attempt(self, attempt: AttemptRecord, inst: Instance, state: AttemptState, reason: str,
                     now: datetime, report: TickReport) -> None:
        self.store.set_attempt_state(attempt.id, AttemptState.TERMINATE_REQUESTED, now, reason=reason)
        self._terminate(self.providers[attempt.offer.provider], inst.instance_id, report)
        self.store.set_attempt_state(attempt.id, state, now, reason=reason)

    def _terminate(self, provider: Provider, instance_id: str, report: TickReport) -> None:
        try:
            provider.terminate(instance_id)
        except InstanceNotFoundError:
            pass
        except ProviderError as exc:
            report.errors.append(f"terminate {provider.name} {instance_id}: {exc}")

    def _sweep_unowned(self, listed: Mapping[str, list[Instance]], now: datetime, report: TickReport) -> None:
        """End machines no live attempt owns: stragglers of ended attempts (after a notice's drain time)
        and orphans (tagged as orch's, unknown to the store) after the grace period."""
        live = self.store.all_live_launch_ids()
        # PREEMPTED counts: a Vast instance outbid to "stopped" still bills its disk until destroyed.
        candidates = [(name, inst) for name, instances in listed.items() for inst in instances
                      if inst.state is not InstanceState.TERMINATED and inst.owner == self.config.owner
                      and inst.launch_id not in live]
        ended = self.store.attempts_by_launch_ids([i.launch_id for _, i in candidates if i.launch_id])
        seen_now: set[tuple[str, str]] = set()
        for name, inst in candidates:
            attempt = ended.get(inst.launch_id or "")
            if attempt is not None:
                reason = attempt.reason or ""
                if inst.state is InstanceState.STOPPED and reason == "idle: stopped":
                    continue  # stopped on purpose, keeping its disk
                drain = self.config.notice_drain if reason.startswith("notice") else timedelta(0)
                key = (name, inst.instance_id)
                if now - (attempt.ended_at or now) >= drain and key not in self._asked_to_end:
                    # Once per process: a cloud may keep listing a reclaimed instance (AWS, ~1 h).
                    self._asked_to_end.add(key)
                    self._terminate(self.providers[name], inst.instance_id, report)
                    report.terminated += 1
                continue
            key = (name, inst.instance_id)
            seen_now.add(key)
            first = self._orphans_seen.setdefault(key, now)
            if now - first >= self.config.orphan_grace:
                self._terminate(self.providers[name], inst.instance_id, report)
                self.store.event("orphan-terminated", f"{name} {inst.instance_id} (launch {inst.launch_id}) is "
                                 "tagged as orch's but unknown to the store", now)
                report.orphans_terminated += 1
                if self.metrics:
                    self.metrics.orphans_terminated.labels(name).inc()
        self._orphans_seen = {k: v for k, v in self._orphans_seen.items() if k in seen_now}

    def _accrue(self, attempt: AttemptRecord, job: JobRecord, now: datetime) -> None:
        since = (self._spend_marks.get(attempt.id) or self.store.spend_mark(attempt.id) or attempt.started_at
                 or attempt.created_at)
        if since is None or now <= since:
            self._spend_marks[attempt.id] = now
            return
        usd = accrued_usd(attempt.offer.price_hr, since, now)
        if usd > 0:
            self.store.add_spend(job.id, attempt.id, usd, since, now)
        self._spend_marks[attempt.id] = now

    def _publish_metrics(self, listed: Mapping[str, list[Instance]]) -> None:
        if self.metrics is None:
            return
        self.metrics.instances.clear()
        burn = 0.0
        for name, instances in listed.items():
            for inst in instances:
                if not inst.state.is_gone and inst.state is not InstanceState.STOPPED:
                    self.metrics.instances.labels(name, inst.market.value).inc()
                    burn += inst.price_hr or 0.0
        self.metrics.burn_usd_per_hour.set(burn)
        self.metrics.jobs.clear()
        for job in self.store.active_jobs():
            self.metrics.jobs.labels(job.status.value).inc()
