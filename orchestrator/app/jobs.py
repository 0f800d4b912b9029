"""What ``orch plan / apply / status / down / events`` do, without the CLI: typed, testable on its own.

The CLI (orchestrator/cli/jobs.py) parses flags, calls one function here, and prints the value it gets
back. Launching and tearing down go through the engine's Reconciler on the SQL store, exactly as the
daemon would, so a command never knows a cloud's details.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.clock import utcnow
from orchestrator.engine.events import LAUNCH_WAITS, EventKind

#: Starts a plan warning that a machine of the chosen offer could not start the job (see runtime/preflight.py).
BOOT_WARNING = "boot: "

if TYPE_CHECKING:
    from sqlmodel import Session

    from orchestrator.app.preflight import BootCheck
    from orchestrator.config.file import OrchConfig
    from orchestrator.daemon.assembly import Service
    from orchestrator.engine.failure import Failure
    from orchestrator.engine.reconciler import Reconciler
    from orchestrator.engine.tick import TickReport
    from orchestrator.manifest import LoadedManifest
    from orchestrator.manifest.code_spec import CodePin
    from orchestrator.manifest.schema import Manifest
    from orchestrator.offers.planner import Plan, PlannedOffer, PlanRequest
    from orchestrator.offers.sources import OfferSources
    from orchestrator.runtime.codepack import Pack
    from orchestrator.store import Store
    from orchestrator.store.models import Event, InstanceRow, Job
    from orchestrator.store.repo import ApplyResult
    from providers.base import Offer, Provider


class JobsError(RuntimeError):
    """An operation failed (exit 1); the message says what and, where it can, what to do."""


class BadInputError(ValueError):
    """The user's input cannot be used (exit 2)."""


# -- manifests ----------------------------------------------------------------------------------------

def load(paths: Sequence[Path], *, allow_dirty: bool = False) -> list[LoadedManifest]:
    """Load and validate manifests, and pin each one's code to the commit seen now (``code.pin``,
    orchestrator/runtime/codepack.py). Raises orchestrator.manifest.ManifestError with every problem, or
    BadInputError when the code cannot be packed (no repository, over the size limit)."""
    return load_with_packs(paths, allow_dirty=allow_dirty)[0]


def load_with_packs(paths: Sequence[Path], *, allow_dirty: bool = False
                    ) -> tuple[list[LoadedManifest], list[Pack | None]]:
    """:func:`load`, with each manifest's code pack (None where nothing is shipped) for display."""
    from orchestrator.manifest import load_manifests
    from orchestrator.runtime.codepack import CodePackError, pin_loaded

    try:
        return pin_loaded(load_manifests(list(paths)), allow_dirty=allow_dirty)
    except CodePackError as exc:
        raise BadInputError(str(exc)) from None


# -- plan ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class JobPlan:
    """One job's plan: ``options`` are the chosen offer then up to ``alternatives`` more, cheapest first."""

    name: str
    source: str
    plan: Plan
    alternatives: int
    estimated_hours: float | None
    warnings: tuple[str, ...] = ()    # the model does not fit / is overprovisioned / image vs GPU (fit/planning)
    code: CodePin | None = None        # what every node gets: the commit and pack pinned at load (codepack)
    #: Cheaper offers of providers not configured ("configure gcp to save $X/h"): never chosen, apply cannot get them.
    hints: tuple[str, ...] = ()

    @property
    def options(self) -> tuple[PlannedOffer, ...]:
        return self.plan.eligible[: 1 + self.alternatives]

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.name,
            "source": self.source,
            "estimated_hours": self.estimated_hours,
            "chosen": planned_json(self.plan.chosen) if self.plan.chosen else None,
            "alternatives": [planned_json(p) for p in self.options[1:]],
            "eligible_count": len(self.plan.eligible),
            "rejected": [planned_json(p) for p in self.plan.rejected],
            "near_misses": [planned_json(p) for p in self.plan.near_misses(NEAR_MISSES)],
            "warnings": list(self.warnings),
            "code": self.code.model_dump(mode="json") if self.code is not None else None,
            "hints": list(self.hints),
        }


#: Rejected offers ``orch plan`` shows with what excluded them.
NEAR_MISSES = 3


def planned_json(p: PlannedOffer) -> dict[str, Any]:
    return p.to_json()


def plan_jobs(loaded: Sequence[LoadedManifest], sources: OfferSources, *, alternatives: int = 4,
              only_providers: Sequence[str] | None = None, now: datetime | None = None,
              boot_check: BootCheck | None = None) -> list[JobPlan]:
    """Rank every offer for each manifest, the way the engine will when it launches.

    ``sources``: orchestrator.offers.sources.offer_sources(...), as the engine builds it.
    ``only_providers`` (the configured ones, for ``--configured``) keeps offers of those providers only:
    what ``orch apply --launch`` can actually get."""
    from orchestrator.engine.jobspec import jobspec_from_manifest
    from orchestrator.offers.planner import plan

    if alternatives < 0:
        raise BadInputError(f"--alternatives must be 0 or more, got {alternatives}")
    now = now or utcnow()
    # What a model-only job's GPUs are chosen from, and what the fit warnings compare against.
    offers = [o for o in sources.catalog if only_providers is None or o.provider in only_providers]
    out: list[JobPlan] = []
    for m in loaded:
        req = jobspec_from_manifest(m.manifest, now, offers).plan
        everywhere = sources.offers(req.gpu_request())
        found = everywhere if only_providers is None else [o for o in everywhere if o.provider in only_providers]
        the_plan = plan(req, found)
        warnings = _fit_warnings(m.manifest, req, the_plan, offers)
        hints = () if only_providers is None else _unconfigured_hints(req, everywhere, the_plan, only_providers)
        if boot_check is not None:
            warnings += _boot_warnings(m.manifest, the_plan, boot_check)
        out.append(JobPlan(m.manifest.name, str(m.source), the_plan, alternatives, req.estimated_hours,
                           tuple(warnings), m.manifest.code.pin if m.manifest.code is not None else None, hints))
    return out


def launchable_providers(config: OrchConfig | None) -> tuple[str, ...]:
    """The providers ``orch apply`` (and the daemon) can launch on: the config's enabled ones; none without a
    config. ``orch plan`` and the apply preview plan on exactly these, so they choose what apply launches."""
    return tuple(config.enabled_providers()) if config is not None else ()


def _unconfigured_hints(req: PlanRequest, everywhere: Sequence[Offer], chosen_plan: Plan,
                        configured: Sequence[str]) -> tuple[str, ...]:
    """Per provider not configured, its cheapest eligible offer where it beats the chosen one (at most 3)."""
    from orchestrator.offers.planner import plan

    others = plan(req, [o for o in everywhere if o.provider not in configured]).eligible
    chosen = chosen_plan.chosen
    best: dict[str, PlannedOffer] = {}
    for p in others:
        if p.offer.provider not in best and (chosen is None or p.total_price_hr < chosen.total_price_hr - 0.005):
            best[p.offer.provider] = p
    hints = []
    for provider, p in list(best.items())[:3]:
        what = f"{p.offer.instance_type} ${p.total_price_hr:.2f}/h"
        hints.append(f"configure {provider} to save ${chosen.total_price_hr - p.total_price_hr:.2f}/h ({what})"
                     if chosen is not None else f"configure {provider} to launch it ({what})")
    return tuple(hints)


def _boot_warnings(manifest: Manifest, the_plan: Plan, boot_check: BootCheck) -> list[str]:
    """Nothing is launched that cannot start: say so now, not after the engine refused to launch it. The engine
    moves on from an offer whose provider cannot start the job; it waits only when no eligible provider can."""
    if the_plan.chosen is None:
        return []
    first: dict[str, Offer] = {}
    for p in the_plan.eligible:
        first.setdefault(p.offer.provider, p.offer)
    problems: list[str] = []
    for provider, offer in first.items():
        problem = boot_check(manifest, offer)
        if problem is None:
            if not problems:
                return []
            return [f"{'; '.join(problems)}; the engine moves on to {provider}"]
        problems.append(problem)
    return [f"{BOOT_WARNING}{'; '.join(problems)} (not launched until fixed)"]


def _fit_warnings(manifest: Manifest, req: PlanRequest, the_plan: Plan, offers: Sequence[Offer]) -> list[str]:
    """The memory model's and the image's warnings for one job (orchestrator.fit.planning)."""
    from orchestrator.fit.planning import allowed_offers, job_warnings

    allowed = [o for o in allowed_offers(offers, req.providers_allow, req.providers_deny, req.regions_allow,
                                         req.regions_deny) if o.market in req.markets]
    chosen = the_plan.chosen.offer if the_plan.chosen else None
    return job_warnings(req.fit, manifest.resources.gpu, req.count, req.nodes, chosen, allowed, manifest.image)


# -- apply --------------------------------------------------------------------------------------------

def apply(store: Store, loaded: Sequence[LoadedManifest], *, prune: bool = False,
          now: datetime | None = None) -> ApplyResult:
    """Record the manifests as the desired state in ONE transaction: all of it, or (on error) nothing."""
    from orchestrator.store import repo

    specs = [repo.AppliedJob.from_loaded(*m) for m in loaded]
    now = now or utcnow()
    try:
        with store.transaction() as tx:
            result = repo.apply_jobs(tx, specs, prune=prune, now=now)
            repo.record_event(tx, EventKind.APPLY, f"{len(result.created)} created, {len(result.updated)} updated, "
                              f"{len(result.unchanged)} unchanged, {len(result.pruned)} pruned",
                              data={"created": list(result.created), "updated": list(result.updated),
                                    "pruned": list(result.pruned)}, ts=now)
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    return result


#: The lease owner prefix of a command's one-shot engine (``orch apply --launch``, ``orch down``) on PostgreSQL:
#: its fleet registration is told apart from a daemon's, so a second command is told the true reason it waits.
COMMAND_LEASE_PREFIX = "orch-cmd-"


def daemon_running(store: Store, now: datetime | None = None) -> bool:
    """Whether a daemon is looking after this store: the SQLite daemon lock is held, or (PostgreSQL)
    some daemon's registration is live (orchestrator/store/fleet.py); a command's registration
    (``command_running``) is not a daemon's."""
    from orchestrator.store.leases import DaemonAlreadyRunningError, daemon_lock, lock_path

    if lock_path(store) is not None:
        try:
            with daemon_lock(store):
                return False
        except DaemonAlreadyRunningError:
            return True
    return any(not o.startswith(COMMAND_LEASE_PREFIX) for o in _registered(store, now))


def command_running(store: Store, now: datetime | None = None) -> str | None:
    """PostgreSQL: the lease owner of another command's one-shot engine (``orch apply --launch``, ``orch
    down``) registered in the fleet now, else None. (On SQLite such a command holds the daemon lock, which
    names its pid.)"""
    return next((o for o in _registered(store, now) if o.startswith(COMMAND_LEASE_PREFIX)), None)


def _registered(store: Store, now: datetime | None) -> list[str]:
    from orchestrator.store import queries
    from orchestrator.store.leases import lock_path

    if lock_path(store) is not None:
        return []
    with store.transaction() as tx:
        return queries.unexpired_lease_owners(tx, now or utcnow())


@dataclass(frozen=True, slots=True)
class Launch:
    """A machine the engine got for a job during this command."""

    job: str
    provider: str
    instance_id: str
    instance_type: str
    region: str
    market: str
    price_hr: float

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "provider": self.provider, "instance_id": self.instance_id,
                "instance_type": self.instance_type, "region": self.region, "market": self.market,
                "price_hr": self.price_hr}


@dataclass(frozen=True, slots=True)
class EventView:
    id: int
    ts: datetime
    job: str | None
    kind: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    #: How many times this condition was seen (a waiting job's ``no-offer`` is one event, counted) and when last.
    count: int = 1
    last_ts: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "ts": self.ts.isoformat(), "job": self.job, "kind": self.kind,
                "message": self.message, "data": self.data, "count": self.count,
                "last_ts": (self.last_ts or self.ts).isoformat()}

    def line(self) -> str:
        again = f" (x{self.count}, last {self.last_ts or self.ts:%Y-%m-%d %H:%M:%S})" if self.count > 1 else ""
        return f"{self.ts:%Y-%m-%d %H:%M:%S} {self.job or '-':<16} {self.kind:<16} {self.message}{again}"


@dataclass
class LaunchOutcome:
    launches: list[Launch] = field(default_factory=list)
    #: jobs still waiting for a machine after the ticks, with the last reason the store gives
    waiting: dict[str, str] = field(default_factory=dict)
    #: the waiting jobs whose last launch failed (not merely no offer, a refusal or a budget): an error
    failed: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    ticks: int = 0


SSH_KEY_ENV = "ORCH_SSH_PUBLIC_KEY"
_DEFAULT_KEYS = ("~/.ssh/id_ed25519.pub", "~/.ssh/id_ecdsa.pub", "~/.ssh/id_rsa.pub")


def ssh_public_key(environ: Mapping[str, str] | None = None) -> str:
    """The public key machines are launched with (clouds such as Lambda require one): ``$ORCH_SSH_PUBLIC_KEY``
    (the key itself, or the path of a .pub file), else the user's usual ~/.ssh/*.pub; "" when none."""
    import os

    from orchestrator.config.public_key import is_public_key, public_key

    env = os.environ if environ is None else environ
    value = env.get(SSH_KEY_ENV, "").strip()
    if value:       # given: a key or a path, checked (a PublicKeyError, a ValueError, names the fix)
        return public_key(value, source=SSH_KEY_ENV)
    for candidate in _DEFAULT_KEYS:
        try:
            text = Path(candidate).expanduser().read_text(errors="replace").strip()
        except OSError:
            continue
        if is_public_key(text):
            return text
    return ""


@dataclass
class Engine:
    """A Reconciler on the SQL store with the configured providers (what the CLI ticks by itself)."""

    store: Store
    reconciler: Reconciler
    lock: AbstractContextManager[None]
    #: Its lease owner on PostgreSQL (None on SQLite: the daemon lock makes it the only driver).
    lease_owner: str | None = None

    def tick(self) -> TickReport:
        return self.reconciler.tick()


def build_engine(store: Store, config: OrchConfig, providers: Mapping[str, Provider],
                 catalog: Sequence[Offer], *, launches_allowed: bool = True, use_live_offers: bool = True,
                 clock: Callable[[], datetime] = utcnow) -> Engine:
    """The engine the daemon would run (``build_service``): the CLI acts as a one-shot daemon under the same
    discipline as daemons. ``lock`` is the SQLite daemon lock there; on PostgreSQL it is a membership of the
    fleet (a lease owner of its own, joined on entry, left on exit), so this engine drives only the jobs it
    holds leases on and its cloud calls pass the fence: an ``orch apply --launch`` racing a starting daemon
    never launches a job the daemon launches too. ``launches_allowed=False`` keeps it from buying machines
    (``orch down`` must not launch what is pending while it tears something else down)."""
    from dataclasses import replace

    from orchestrator.config.errors import ConfigError
    from orchestrator.config.public_key import PublicKeyError
    from orchestrator.daemon.assembly import AUTO, build_service, default_lease_owner, load_service_settings
    from orchestrator.store.leases import daemon_lock, lock_path

    base = load_service_settings(config)
    try:
        key = base.ssh_public_key or ssh_public_key()
    except PublicKeyError as exc:     # a bad $ORCH_SSH_PUBLIC_KEY: the caller's clear error, not a launch without it
        raise ConfigError(str(exc)) from None
    settings = replace(base, use_live_offers=use_live_offers, ssh_public_key=key)
    owner = COMMAND_LEASE_PREFIX + default_lease_owner() if store.dialect == "postgresql" else AUTO
    service = build_service(config=config, store=store, providers=providers, catalog=catalog, settings=settings,
                            lease_owner=owner, clock=clock, launches_allowed=launches_allowed)
    lock: AbstractContextManager[None] = (daemon_lock(store) if lock_path(store) is not None
                                          else _fleet_membership(service))
    return Engine(store, service.reconciler, lock, service.lease_owner)


@contextmanager
def _fleet_membership(service: Service) -> Iterator[None]:
    """Joined to the fleet for the block (PostgreSQL; a no-op without a lease owner), then left: its leases
    go back at once, so the daemons need not wait out its TTL to drive what it launched."""
    from orchestrator.store.fleet import leave

    join = getattr(service.engine_store, "join", None)
    if service.lease_owner is None or not callable(join):
        yield
        return
    join(service.reconciler.deps.clock())
    try:
        yield
    finally:
        with service.store.transaction() as tx:    # type: ignore[union-attr]
            leave(tx, service.lease_owner)


def _live_instance_ids(store: Store) -> set[str]:
    from orchestrator.store import repo

    with store.transaction() as tx:
        return {i.launch_id for i in repo.list_instances(tx, live_only=True)}


def launch_pending(engine: Engine, *, max_ticks: int = 8, on_launch: Callable[[Launch], None] | None = None,
                   on_tick: Callable[[int], None] | None = None) -> LaunchOutcome:
    """Tick until the clouds and the store agree (or ``max_ticks``), holding the SQLite daemon lock so a
    daemon cannot start meanwhile. Reports every machine that appeared, and what still waits, and why."""
    from orchestrator.engine.states import DesiredState, JobStatus
    from orchestrator.store import repo
    from orchestrator.store.fleet import LeaseLostError
    from providers.errors import ProviderError

    outcome = LaunchOutcome()
    seen = _live_instance_ids(engine.store)
    start_event = _last_event_id(engine.store)
    started = utcnow()      # a condition seen again is an older event counted again (models.Event): seen since
    with engine.lock:
        for n in range(max_ticks):
            try:
                report = engine.tick()
            except ProviderError as exc:
                raise JobsError(f"launch failed: {exc}") from None
            except LeaseLostError as exc:   # a daemon took the jobs over: it drives them from here
                outcome.errors.append(f"stopped: {exc}")
                break
            outcome.ticks = n + 1
            outcome.errors.extend(report.errors)
            for launch in _new_launches(engine.store, seen):
                outcome.launches.append(launch)
                if on_launch:
                    on_launch(launch)
            if on_tick:
                on_tick(n + 1)
            if report.quiet:
                break
    with engine.store.transaction() as tx:
        jobs = repo.list_jobs(tx, desired_states=[DesiredState.ACTIVE], statuses=[JobStatus.PENDING,
                                                                                   JobStatus.RECOVERING])
        for job in jobs:
            if job.lease_owner is not None and job.lease_owner != engine.lease_owner:
                continue                    # a daemon holds it (PostgreSQL): it launches it, not this command
            events = [e for e in repo.list_events(tx, job_id=job.id)
                      if e.kind in LAUNCH_WAITS
                      and ((e.id or 0) > start_event or (e.last_ts is not None and e.last_ts >= started))]
            events.sort(key=lambda e: e.seen_at)
            outcome.waiting[job.name] = events[-1].message if events else "no launch was attempted"
            if events and events[-1].kind == EventKind.LAUNCH_FAILED:
                outcome.failed.add(job.name)
    return outcome


def _new_launches(store: Store, seen: set[str]) -> list[Launch]:
    from orchestrator.store import repo

    out: list[Launch] = []
    with store.transaction() as tx:
        for inst in repo.list_instances(tx, live_only=True):
            if inst.launch_id in seen or not inst.instance_id:
                continue
            seen.add(inst.launch_id)
            job = repo.get_job_by_id(tx, inst.job_id) if inst.job_id is not None else None
            out.append(Launch(job.name if job else "-", inst.provider, inst.instance_id, inst.instance_type,
                              inst.region, inst.market, inst.price_hr))
    return out


def _last_event_id(store: Store) -> int:
    from orchestrator.store import queries

    with store.transaction() as tx:
        return queries.last_event_id(tx)


# -- status -------------------------------------------------------------------------------------------

#: Machine states that bill (an unreachable machine is still the cloud's, and still billed).
_BURNING_STATES = frozenset({"pending", "running", "stopping", "unreachable"})


@dataclass(frozen=True, slots=True)
class InstanceView:
    job: str | None
    provider: str
    instance_id: str | None
    launch_id: str
    instance_type: str
    region: str
    market: str
    state: str
    price_hr: float                      # quoted: the offer's $/h
    actual_price_hr: float | None = None  # what the cloud reports for the machine, where it does

    @property
    def burning(self) -> bool:
        return self.state in _BURNING_STATES

    @property
    def charged_price_hr(self) -> float:
        from orchestrator.money.spend import charged_price_hr

        return charged_price_hr(self.actual_price_hr, self.price_hr)

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "provider": self.provider, "instance_id": self.instance_id,
                "launch_id": self.launch_id, "instance_type": self.instance_type, "region": self.region,
                "market": self.market, "state": self.state, "price_hr": self.price_hr,
                "actual_price_hr": self.actual_price_hr, "charged_price_hr": self.charged_price_hr,
                "burning": self.burning}


@dataclass(frozen=True, slots=True)
class JobView:
    name: str
    status: str
    desired_state: str
    instances: tuple[InstanceView, ...]
    burn_hr: float
    spent_usd: float
    relaunches: int
    last_event: EventView | None
    #: Why it failed (or waits), typed (orchestrator/engine/failure.py): for a failed, pending or recovering job.
    failure: Failure | None = None

    @property
    def current(self) -> InstanceView | None:
        return self.instances[-1] if self.instances else None

    def to_json(self) -> dict[str, Any]:
        cur = self.current
        return {"name": self.name, "status": self.status, "desired_state": self.desired_state,
                "provider": cur.provider if cur else None, "instance_id": cur.instance_id if cur else None,
                "region": cur.region if cur else None, "market": cur.market if cur else None,
                "burn_usd_per_hour": round(self.burn_hr, 4), "spent_usd": round(self.spent_usd, 4),
                "relaunches": self.relaunches,
                "last_event": self.last_event.to_json() if self.last_event else None,
                "failure": None if self.failure is None else {
                    "cause": self.failure.cause.value, "first_line": self.failure.first_line,
                    "words": self.failure.words, "fix": self.failure.cause.fix}}


@dataclass(frozen=True, slots=True)
class StatusReport:
    jobs: tuple[JobView, ...]
    instances: tuple[InstanceView, ...]   # live ones

    @property
    def burn_hr(self) -> float:
        return sum(i.charged_price_hr for i in self.instances if i.burning)

    @property
    def spent_usd(self) -> float:
        return sum(j.spent_usd for j in self.jobs)

    def to_json(self) -> dict[str, Any]:
        return {"jobs": [j.to_json() for j in self.jobs], "instances": [i.to_json() for i in self.instances],
                "totals": {"burn_usd_per_hour": round(self.burn_hr, 4), "spent_usd": round(self.spent_usd, 4),
                           "jobs": len(self.jobs), "live_instances": len(self.instances)}}


def status(store: Store, job: str | None = None) -> StatusReport:
    """Jobs (all not deleted, or the one named; a named deleted job is shown too), their live machines,
    money burning now and spent so far. Raises JobsError when ``job`` names no job."""
    from orchestrator.store import queries, repo

    with store.transaction() as tx:
        if job is not None:
            row = repo.get_job(tx, job)
            if row is None:
                raise JobsError(f"no job named {job!r}")
            rows = [row]
        else:
            rows = repo.list_jobs(tx)
        names = queries.job_names(tx)
        live = [_instance_view(i, names) for i in queries.machine_rows(tx)]
        failures = _failures(tx, rows)
        views: list[JobView] = []
        for r in rows:
            mine = tuple(i for i in live if i.job == r.name)
            last = queries.last_event(tx, r.id or 0)
            views.append(JobView(r.name, r.status, r.desired_state, mine,
                                 sum(i.charged_price_hr for i in mine if i.burning), repo.total_spend(tx, r.id or 0),
                                 r.relaunch_count, _event_view(last, names) if last else None,
                                 failures.get(r.id or 0)))
    if job is not None:
        live = [i for i in live if i.job == job]
    return StatusReport(tuple(views), tuple(live))


def failures_by_job(tx: Session, jobs: Sequence[tuple[int, str]]) -> dict[int, Failure]:
    """The typed failure (orchestrator/engine/failure.py) of each ``(job id, status)`` for which it is still
    news (failed, or waiting after it), from the newest failure event's data."""
    from orchestrator.engine.failure import FAILURE_EVENTS, FAILURE_STATUSES, Failure
    from orchestrator.store import queries

    ids = [job_id for job_id, status in jobs if str(status) in FAILURE_STATUSES]
    found = {job_id: Failure.from_data(e.data) for job_id, e in queries.last_failures(tx, ids, FAILURE_EVENTS).items()}
    return {job_id: f for job_id, f in found.items() if f is not None}


def _failures(tx: Session, rows: Sequence[Job]) -> dict[int, Failure]:
    return failures_by_job(tx, [(r.id, r.status) for r in rows if r.id is not None])


def job_failure(store: Store, name: str) -> Failure | None:
    """The named job's typed failure, where it is still news (``orch logs`` says it); None otherwise."""
    from orchestrator.store import repo

    with store.transaction() as tx:
        row = repo.get_job(tx, name)
        return _failures(tx, [row]).get(row.id or 0) if row is not None else None


def _instance_view(i: InstanceRow, names: Mapping[int, str]) -> InstanceView:
    return InstanceView(names.get(i.job_id or 0), i.provider, i.instance_id, i.launch_id, i.instance_type, i.region,
                        i.market, i.state, float(i.price_hr or 0.0), i.actual_price_hr)


def _event_view(e: Event, names: Mapping[int, str]) -> EventView:
    return EventView(int(e.id or 0), e.ts, names.get(e.job_id or 0), e.kind, e.message, dict(e.data or {}),
                     e.count, e.last_ts)


# -- down ---------------------------------------------------------------------------------------------

def mark_down(store: Store, names: Sequence[str] = (), *, everything: bool = False,
              now: datetime | None = None) -> list[str]:
    """Mark jobs for teardown (desired state DELETED) in one transaction; return their names.

    Raises JobsError when a named job does not exist or nothing matches."""
    from orchestrator.engine.states import DesiredState
    from orchestrator.store import repo

    now = now or utcnow()
    with store.transaction() as tx:
        if everything:
            targets = [j.name for j in repo.list_jobs(tx)]
        else:
            missing = [n for n in names if repo.get_job(tx, n) is None]
            if missing:
                raise JobsError(f"no job named {', '.join(repr(n) for n in missing)}")
            targets = list(dict.fromkeys(names))
        for name in targets:
            repo.set_desired_state(tx, name, DesiredState.DELETED, now=now)
    return targets


@dataclass
class DownOutcome:
    jobs: list[str]
    remaining: list[InstanceView]
    errors: list[str] = field(default_factory=list)

    @property
    def confirmed(self) -> bool:
        return not self.remaining


def live_machines(store: Store, jobs: Sequence[str]) -> list[InstanceView]:
    """Machines of these jobs the store still believes may exist: a live attempt, or a live instance row."""
    from orchestrator.store import queries

    with store.transaction() as tx:
        ids = queries.jobs_named(tx, jobs)
        if not ids:
            return []
        rows = queries.machine_rows(tx, list(ids))
        live_attempts = queries.live_attempts_of(tx, list(ids))
    out = [_instance_view(r, ids) for r in rows]
    known = {v.launch_id for v in out}
    for a in live_attempts:
        if a.launch_id not in known:
            out.append(InstanceView(ids.get(a.job_id), "?", None, a.launch_id, "", "", "", a.state, 0.0))
    return out


def wait_down(engine: Engine | None, store: Store, jobs: Sequence[str], *, timeout_s: float = 300.0,
              poll_s: float = 1.0, on_tick: Callable[[list[InstanceView]], None] | None = None,
              monotonic: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
              ) -> DownOutcome:
    """Tick the engine (or, with ``engine=None``, let a running daemon work) until every machine of
    ``jobs`` is confirmed gone by its provider, or ``timeout_s`` passes."""
    deadline = monotonic() + timeout_s
    outcome = DownOutcome(list(jobs), live_machines(store, jobs))
    ctx: AbstractContextManager[None] = engine.lock if engine is not None else nullcontext()
    with ctx:
        while True:
            if engine is not None:
                report = engine.tick()
                outcome.errors.extend(report.errors)
            outcome.remaining = live_machines(store, jobs)
            if on_tick:
                on_tick(outcome.remaining)
            if not outcome.remaining or monotonic() >= deadline:
                return outcome
            sleep(poll_s)


# -- events -------------------------------------------------------------------------------------------

def events(store: Store, job: str | None = None, *, after_id: int | None = None,
           limit: int | None = None) -> list[EventView]:
    """The append-only event log, oldest first (all events, or one job's). Raises JobsError for an
    unknown job name."""
    from orchestrator.store import queries, repo

    with store.transaction() as tx:
        job_id: int | None = None
        if job is not None:
            row = repo.get_job(tx, job)
            if row is None:
                raise JobsError(f"no job named {job!r}")
            job_id = row.id
        names = queries.job_names(tx)
        rows = repo.list_events(tx, job_id=job_id, after_id=after_id, limit=limit)
        return [_event_view(e, names) for e in rows]


def follow(store: Store, job: str | None = None, *, after_id: int | None = None, poll_s: float = 1.0,
           max_wait_s: float | None = None, monotonic: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> Iterator[EventView]:
    """Events after ``after_id`` as they are appended, polling every ``poll_s``; ends after ``max_wait_s``
    with no new event (None: never; the caller stops it with Ctrl-C)."""
    last = after_id
    quiet_since = monotonic()
    while True:
        batch = events(store, job, after_id=last)
        for e in batch:
            last = e.id
            yield e
        if batch:
            quiet_since = monotonic()
        elif max_wait_s is not None and monotonic() - quiet_since >= max_wait_s:
            return
        sleep(poll_s)
