"""``orch apply --launch`` and ``orch down``'s engine: the daemon's engine run once by a command, under the
same discipline (the SQLite daemon lock, or a fleet membership on PostgreSQL), and what it launched."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.app.errors import JobsError
from orchestrator.clock import utcnow
from orchestrator.engine.events import LAUNCH_WAITS, EventKind
from providers.offer import Market

if TYPE_CHECKING:
    from orchestrator.config.file import OrchConfig
    from orchestrator.daemon.assembly import Service
    from orchestrator.engine.reconciler import Reconciler
    from orchestrator.engine.tick import TickReport
    from orchestrator.store import Store
    from providers.base import Offer, Provider

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
    from orchestrator.store import command_queries
    from orchestrator.store.leases import lock_path

    if lock_path(store) is not None:
        return []
    with store.transaction() as tx:
        return command_queries.unexpired_lease_owners(tx, now or utcnow())


@dataclass(frozen=True, slots=True)
class Launch:
    """A machine the engine got for a job during this command."""

    job: str
    provider: str
    instance_id: str
    instance_type: str
    region: str
    market: Market
    price_hr: float

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "provider": self.provider, "instance_id": self.instance_id,
                "instance_type": self.instance_type, "region": self.region, "market": self.market.value,
                "price_hr": self.price_hr}


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
                              inst.region, Market(inst.market), inst.price_hr))
    return out


def _last_event_id(store: Store) -> int:
    from orchestrator.store import command_queries

    with store.transaction() as tx:
        return command_queries.last_event_id(tx)
