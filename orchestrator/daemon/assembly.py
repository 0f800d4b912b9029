"""Building the reconcile engine: the ONE place a ``Reconciler`` is assembled, for the CLI (``orch tick``,
``orch daemon``, ``orch apply --launch``, ``orch down``) and the tests alike.

Every part has a default from orch's config and can be given instead (tests pass fakes' providers, a
catalog, a clock, a scripted monitor, an in-memory store). Providers come from
``build_providers(load_config())``, the store from ``open_store()`` (``$ORCH_DATABASE_URL`` or the SQLite
file), the catalog from the shipped snapshot. On PostgreSQL the engine store joins the fleet as
``<hostname>-<pid>-<random>`` and takes its share of the jobs (orchestrator/store/fleet.py), and the engine's
providers are fenced (orchestrator/daemon/fencing.py); on SQLite there is no lease owner (one daemon, guarded by
``orchestrator.store.leases.daemon_lock``).

The seams: every cloud machine boots with a script that installs orch's agent and starts the job
(orchestrator/runtime/boot.py); the agent reports to the job's store, which the store monitor reads each tick
(outbound only, no SSH). SSH is the second channel: SSH-provider hosts are started and read over SSH, and with
``ssh_private_key`` set a cloud job with no store to report to is too (its machine then boots with no script,
so a job is never started twice). orchestrator/runtime/store_monitor.py has the rule.

The engine's knobs (the config's ``daemon:`` section) are read in orchestrator/daemon/service_settings.py.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from orchestrator.config.errors import ConfigError
from orchestrator.config.file import OrchConfig, load_config
from orchestrator.daemon.service_settings import ServiceSettings, load_service_settings

if TYPE_CHECKING:
    from orchestrator.daemon.observability import DaemonMetrics
    from orchestrator.engine.config import EngineHooks
    from orchestrator.engine.hooks import Bootstrapper, Monitor, StartupRenderer
    from orchestrator.engine.ports import EngineStore
    from orchestrator.engine.reconciler import Reconciler
    from orchestrator.engine.recovery_policy import RecoveryPolicy
    from orchestrator.runtime.node_facts import NodeSettings
    from orchestrator.runtime.node_renewal import CredentialRenewer
    from orchestrator.store.db import Store
    from orchestrator.store.sqlstore import SqlEngineStore
    from providers.base import Offer, Provider

#: Passed as ``lease_owner`` to mean "decide from the database": default_lease_owner() on PostgreSQL, else None.
AUTO = "auto"


def default_lease_owner() -> str:
    """``<prefix>-<pid>-<random>``: unique per daemon process, readable in the jobs table.

    The prefix is ``$ORCH_LEASE_OWNER`` or the hostname. The random part makes two processes differ even
    where everything else is equal (two containers with one hostname, both pid 1; one ORCH_LEASE_OWNER
    given to several daemons): a lease owner never names two daemons, so two never drive one job.
    """
    prefix = os.environ.get("ORCH_LEASE_OWNER") or socket.gethostname() or "orch"
    return f"{prefix[:64]}-{os.getpid()}-{secrets.token_hex(6)}"


@dataclass
class Service:
    """A built engine and what it holds open; ``close()`` releases the store and the providers' clients."""

    reconciler: Reconciler
    engine_store: EngineStore
    store: Store | None                 # None when the caller gave its own engine store (tests)
    providers: dict[str, Provider]
    metrics: DaemonMetrics
    settings: ServiceSettings
    lease_owner: str | None

    def close(self) -> None:
        flush = getattr(self.engine_store, "flush", None)
        if callable(flush):
            from orchestrator.store.fleet import LeaseLostError

            try:
                flush()                 # buffered spend rows
            except LeaseLostError:
                pass                    # accrued under a lapsed lease: the job's holder charges it again
        for provider in self.providers.values():
            close = getattr(provider, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # closing a client must never mask the caller's own error
                    pass
        if self.store is not None:
            self.store.close()


@dataclass(frozen=True)
class Seams:
    """The hooks a caller may give instead of the config's (None: the config decides)."""

    monitor: Monitor | None = None
    bootstrapper: Bootstrapper | None = None
    recovery: RecoveryPolicy | None = None
    startup: StartupRenderer | None = None
    #: Per provider (or "<provider>/<instance id>"): facts about machines no config says (test endpoints).
    node_settings: Mapping[str, NodeSettings] | None = None


def _attach_alerts(store: Store, config: OrchConfig, *, close_on_error: bool) -> None:
    """Committed events of ``store`` become webhook alerts (the config's ``alerts:``); sent from background
    workers, so no tick waits on a receiver. ``store.close()`` gives queued alerts a last bounded try."""
    from orchestrator.daemon.alerts import attach_alerts

    try:
        attach_alerts(store, config.alerts)
    except ConfigError:
        if close_on_error:
            store.close()
        raise


def build_service(
    *,
    config: OrchConfig | None = None,
    store_url: str | None = None,
    store: Store | None = None,
    engine_store: EngineStore | None = None,
    providers: Mapping[str, Provider] | None = None,
    catalog: Sequence[Offer] | None = None,
    settings: ServiceSettings | None = None,
    lease_owner: str | None = AUTO,
    clock: Callable[[], datetime] | None = None,
    monitor: Monitor | None = None,
    bootstrapper: Bootstrapper | None = None,
    recovery: RecoveryPolicy | None = None,
    startup: StartupRenderer | None = None,
    metrics: DaemonMetrics | None = None,
    launches_allowed: bool = True,
    node_settings: Mapping[str, NodeSettings] | None = None,
) -> Service:
    """Build the engine. Every argument overrides what the config would give; ``engine_store`` replaces the
    SQL store altogether (the in-memory store of the engine's unit tests). ``node_settings``: per provider,
    what the boot script, the store monitor and the SSH hooks need to know about machines (metadata URLs,
    store endpoint, agent intervals; tests); default: ``daemon.store_endpoint`` for every provider."""
    from orchestrator.clock import utcnow
    from orchestrator.config.providers import build_providers
    from orchestrator.daemon.observability import DaemonMetrics
    from orchestrator.engine.config import Deadlines, EngineConfig, EngineDeps
    from orchestrator.engine.reconciler import Reconciler

    config = config or load_config()
    settings = settings or load_service_settings(config)
    built = dict(providers) if providers is not None else build_providers(config)
    if catalog is None:
        from providers.catalog import load_catalog

        catalog = load_catalog().offers
    opened, owner_of_leases = None, None
    if engine_store is None:
        opened, engine_store, owner_of_leases = _sql_store(config, settings, store, store_url, catalog, lease_owner,
                                                           clock or utcnow)
        _attach_alerts(opened, config, close_on_error=store is None)
    metrics = metrics or DaemonMetrics()
    deadlines = Deadlines(boot_timeout=settings.boot_timeout, heartbeat_timeout=settings.heartbeat_timeout,
                          unreachable_grace=settings.unreachable_grace)
    engine_config = EngineConfig(owner=config.owner, orphan_grace=settings.orphan_grace,
                                 notice_drain=settings.notice_drain, ssh_public_key=settings.ssh_public_key,
                                 use_live_offers=settings.use_live_offers, launches_allowed=launches_allowed,
                                 budgets=config.budgets, deadlines=deadlines,
                                 store_id=_store_id(opened) if opened is not None else "")
    hooks = _hooks(settings, built, Seams(monitor, bootstrapper, recovery, startup, node_settings), config)
    fleet = getattr(engine_store, "fleet", None)
    if opened is not None and fleet is not None:
        from orchestrator.daemon.fencing import fenced

        engine_providers = fenced(built, opened, fleet)    # several daemons: cloud calls pass the fence
    else:
        engine_providers = built
    deps = EngineDeps(store=engine_store, providers=engine_providers, catalog=tuple(catalog), config=engine_config,
                      clock=clock or utcnow, hooks=hooks, metrics=metrics)
    return Service(Reconciler(deps), engine_store, opened, built, metrics, settings, owner_of_leases)


def _store_id(store: Store) -> str:
    from orchestrator.store.identity import store_id

    return store_id(store)


def _sql_store(config: OrchConfig, settings: ServiceSettings, store: Store | None, store_url: str | None,
               catalog: Sequence[Offer], lease_owner: str | None,
               clock: Callable[[], datetime]) -> tuple[Store, SqlEngineStore, str | None]:
    from orchestrator.store.db import open_store
    from orchestrator.store.sqlstore import SqlEngineStore

    opened = store or open_store(store_url)
    owner = ((default_lease_owner() if opened.dialect == "postgresql" else None) if lease_owner == AUTO
             else lease_owner)
    return opened, SqlEngineStore(opened, config.owner, catalog=catalog, lease_owner=owner,
                                  lease_ttl=settings.lease_ttl, clock=clock), owner


def _hooks(settings: ServiceSettings, providers: Mapping[str, Provider], given: Seams,
           config: OrchConfig) -> EngineHooks:
    from orchestrator.engine.config import EngineHooks
    from orchestrator.engine.recovery_policy import DefaultRecoveryPolicy

    monitor, bootstrapper, startup = _node_seams(settings, providers, given, config)
    recovery = given.recovery
    if recovery is None:
        recovery = DefaultRecoveryPolicy()
        if settings.recovery_policy != "default":
            from orchestrator.policy.recovery import recovery_for

            recovery = recovery_for(settings.recovery_policy,
                                    overhead_h=settings.restart_overhead.total_seconds() / 3600)
    return EngineHooks(monitor=monitor, bootstrapper=bootstrapper, recovery=recovery, startup=startup)


def _node_seams(settings: ServiceSettings, providers: Mapping[str, Provider], given: Seams,
                config: OrchConfig) -> tuple[Monitor, Bootstrapper, StartupRenderer]:
    """The store channel for every cloud machine (boot script, store monitor); SSH for SSH-provider hosts and,
    with orch's key, for cloud jobs with no store (orchestrator/runtime/store_monitor.py)."""
    from orchestrator.runtime.node_facts import NodeSettings
    from orchestrator.runtime.startup import ManifestStartupRenderer
    from orchestrator.runtime.store_credentials import identities_from_config
    from orchestrator.runtime.store_monitor import CombinedMonitor, RoutingBootstrapper, StoreMonitor, StoreReader

    ssh_key = bool(settings.ssh_private_key)
    nodes = dict(given.node_settings) if given.node_settings is not None else (
        {p: NodeSettings(store_endpoint=settings.store_endpoint) for p in providers} if settings.store_endpoint
        else {})
    identities = identities_from_config(config)
    reader = StoreReader(nodes, state_store=settings.state_store,
                         renewer=_renewer(nodes, identities, settings.state_store))
    ssh_monitor: Monitor | None = None
    ssh_boot: Bootstrapper | None = None
    if ssh_key or "ssh" in providers:
        from pathlib import Path

        from orchestrator.config.file import data_dir
        from orchestrator.runtime.engine_hooks import SshBootstrapper
        from orchestrator.runtime.ssh_monitor import SshMonitor
        from orchestrator.runtime.transport_pool import TransportPool
        from providers.ssh.hostkeys import HostKeyStore

        key = Path(settings.ssh_private_key).expanduser() if ssh_key else None
        pool = TransportPool(providers, key_path=key,
                             host_keys=HostKeyStore(data_dir() / "known_hosts") if ssh_key else None)
        ssh_monitor, ssh_boot = SshMonitor(pool, nodes), SshBootstrapper(pool, nodes)
    monitor = given.monitor or CombinedMonitor(StoreMonitor(reader), ssh_monitor)
    bootstrapper = given.bootstrapper or RoutingBootstrapper(reader, ssh_boot, ssh_key=ssh_key)
    startup = given.startup or ManifestStartupRenderer(nodes, identities=identities,
                                                       state_store=settings.state_store, ssh_key=ssh_key)
    return monitor, bootstrapper, startup


def _renewer(nodes: Mapping[str, NodeSettings], identities: frozenset[str], state_store: str) -> CredentialRenewer:
    """Renews the nodes' scoped store credentials (orchestrator/runtime/node_renewal.py) from this process's
    environment, with each provider's store endpoint."""
    import os

    from orchestrator.runtime.node_facts import node_settings_for
    from orchestrator.runtime.node_renewal import CredentialRenewer
    from orchestrator.runtime.startup import credentials_from_env

    return CredentialRenewer(lambda provider: credentials_from_env(
        os.environ, identities, s3_endpoint=node_settings_for(nodes, provider).store_endpoint),
        state_store=state_store)


def boot_seams(settings: ServiceSettings, providers: Mapping[str, Provider], config: OrchConfig,
               node_settings: Mapping[str, NodeSettings] | None = None
               ) -> tuple[Monitor, Bootstrapper, StartupRenderer]:
    """The engine's store channel as ``build_service`` wires it (monitor, bootstrapper, boot-script renderer),
    for callers that launch one machine outside the engine through the same boot path (``orch smoke``)."""
    return _node_seams(settings, providers, Seams(node_settings=node_settings), config)


def _no_bootstrap() -> Bootstrapper:
    from orchestrator.engine.hooks import NoBootstrap

    return NoBootstrap()
