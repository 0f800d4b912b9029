"""Building the reconcile engine: the ONE place a ``Reconciler`` is assembled, for the CLI (``orch tick``,
``orch daemon``, ``orch apply --launch``, ``orch down``) and the tests alike.

Every part has a default from orch's config and can be given instead (tests pass fakes' providers, a
catalog, a clock, a scripted monitor, an in-memory store). Providers come from
``build_providers(load_config())``, the store from ``open_store()`` (``$ORCH_DATABASE_URL`` or the SQLite
file), the catalog from the shipped snapshot. On PostgreSQL the engine store takes row leases as
``<hostname>-<pid>-<random>`` so several daemons share the work; on SQLite there is no lease owner (one daemon,
guarded by ``orchestrator.store.leases.daemon_lock``).

The seams: with ``ssh_private_key`` set, the SSH bootstrapper starts each job and the SSH monitor reads its
agent (and machines boot with no startup script, so a job is never started twice); without it, machines
boot with the job's startup script rendered from its manifest and only the clouds' states are read.

Engine knobs live in an optional ``daemon:`` section of the config file, each overridable by an env var
(handy for subprocess tests and containers)::

    daemon:
      orphan_grace_s: 600       # ORCH_ORPHAN_GRACE_S: a tagged instance unknown to the store lives this long
      notice_drain_s: 120       # ORCH_NOTICE_DRAIN_S: a noticed machine keeps running this long to upload
      lease_ttl_s: 90           # ORCH_LEASE_TTL_S: PostgreSQL row leases expire after this
      use_live_offers: false    # ORCH_USE_LIVE_OFFERS: merge providers' live prices into the catalog
      ssh_public_key: "ssh-ed25519 ..."   # ORCH_SSH_PUBLIC_KEY: put on every launched machine
      recovery_policy: default  # ORCH_RECOVERY_POLICY: default, or a policy of `orch simulate` (orch,
                                #   uniform-progress, greedy, on-demand) for jobs with a deadline and an estimate
      restart_overhead_s: 720   # ORCH_RESTART_OVERHEAD_S: what one restart costs (boot, setup, restore)
      boot_timeout_s: 1200      # ORCH_BOOT_TIMEOUT_S: a node whose agent never reported this long after launch
                                #   is ended and the job relaunched elsewhere
      heartbeat_timeout_s: 600  # ORCH_HEARTBEAT_TIMEOUT_S: an agent silent this long: the node is lost
      unreachable_grace_s: 600  # ORCH_UNREACHABLE_GRACE_S: a machine its cloud lists unreachable is lost after this
"""

from __future__ import annotations

import math
import os
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from orchestrator.config import ConfigError, OrchConfig, load_config

if TYPE_CHECKING:
    from orchestrator.engine.config import EngineHooks
    from orchestrator.engine.hooks import Bootstrapper, Monitor, StartupRenderer
    from orchestrator.engine.ports import EngineStore
    from orchestrator.engine.reconciler import Reconciler
    from orchestrator.engine.sqlstore import SqlEngineStore
    from orchestrator.observability import DaemonMetrics
    from orchestrator.recovery import RecoveryPolicy
    from orchestrator.store.db import Store
    from providers.base import Offer, Provider

#: Passed as ``lease_owner`` to mean "decide from the database": default_lease_owner() on PostgreSQL, else None.
AUTO = "auto"


@dataclass(frozen=True)
class ServiceSettings:
    orphan_grace: timedelta = timedelta(minutes=10)
    notice_drain: timedelta = timedelta(minutes=2)
    lease_ttl: timedelta = timedelta(seconds=90)
    use_live_offers: bool = False
    ssh_public_key: str = ""
    #: orch's private key for reaching launched machines over SSH (agent bootstrap and monitoring). Unset:
    #: no SSH bootstrap or monitoring; the providers' startup scripts and states are all orch uses.
    ssh_private_key: str = ""
    recovery_policy: str = "default"
    restart_overhead: timedelta = timedelta(minutes=12)
    #: The liveness deadlines (orchestrator/engine/liveness.py); a job's manifest may set its own.
    boot_timeout: timedelta = timedelta(minutes=20)
    heartbeat_timeout: timedelta = timedelta(minutes=10)
    unreachable_grace: timedelta = timedelta(minutes=10)


_MAX_SECONDS = 10 * 365 * 86400.0

_ENV = {
    "orphan_grace_s": "ORCH_ORPHAN_GRACE_S",
    "notice_drain_s": "ORCH_NOTICE_DRAIN_S",
    "lease_ttl_s": "ORCH_LEASE_TTL_S",
    "use_live_offers": "ORCH_USE_LIVE_OFFERS",
    "ssh_public_key": "ORCH_SSH_PUBLIC_KEY",
    "ssh_private_key": "ORCH_SSH_PRIVATE_KEY",
    "recovery_policy": "ORCH_RECOVERY_POLICY",
    "restart_overhead_s": "ORCH_RESTART_OVERHEAD_S",
    "boot_timeout_s": "ORCH_BOOT_TIMEOUT_S",
    "heartbeat_timeout_s": "ORCH_HEARTBEAT_TIMEOUT_S",
    "unreachable_grace_s": "ORCH_UNREACHABLE_GRACE_S",
}


def _daemon_section(config: OrchConfig) -> dict[str, Any]:
    if config.path is None or not config.path.exists():
        return {}
    import yaml

    raw = yaml.safe_load(config.path.read_text()) or {}
    section = raw.get("daemon") if isinstance(raw, dict) else None
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError(f"{config.path}: daemon: must be a mapping")
    unknown = sorted(set(section) - set(_ENV))
    if unknown:
        raise ConfigError(f"{config.path}: daemon.{unknown[0]}: unknown key (known: {', '.join(sorted(_ENV))})")
    return dict(section)


def load_service_settings(config: OrchConfig) -> ServiceSettings:
    """The ``daemon:`` section of the config, each key overridden by its env var when set."""
    values = _daemon_section(config)
    for key, env in _ENV.items():
        if os.environ.get(env) is not None:
            values[key] = os.environ[env]

    def seconds(key: str, default: timedelta) -> timedelta:
        if key not in values:
            return default
        try:
            s = float(values[key])
        except (TypeError, ValueError):
            raise ConfigError(f"daemon.{key} ({_ENV[key]}): not a number of seconds: {values[key]!r}") from None
        if not math.isfinite(s) or not 0 <= s <= _MAX_SECONDS:
            raise ConfigError(f"daemon.{key} ({_ENV[key]}): must be a number of seconds from 0 to {_MAX_SECONDS:g}")
        return timedelta(seconds=s)

    live = values.get("use_live_offers", False)
    if isinstance(live, str):
        live = live.strip().lower() in ("1", "true", "yes", "on")
    base = ServiceSettings()
    return ServiceSettings(
        orphan_grace=seconds("orphan_grace_s", base.orphan_grace),
        notice_drain=seconds("notice_drain_s", base.notice_drain),
        lease_ttl=seconds("lease_ttl_s", base.lease_ttl),
        use_live_offers=bool(live),
        ssh_public_key=str(values.get("ssh_public_key") or ""),
        ssh_private_key=str(values.get("ssh_private_key") or ""),
        recovery_policy=_policy_name(values.get("recovery_policy")),
        restart_overhead=seconds("restart_overhead_s", base.restart_overhead),
        boot_timeout=seconds("boot_timeout_s", base.boot_timeout),
        heartbeat_timeout=seconds("heartbeat_timeout_s", base.heartbeat_timeout),
        unreachable_grace=seconds("unreachable_grace_s", base.unreachable_grace),
    )


def _policy_name(value: object) -> str:
    name = str(value or "default").strip().lower()
    if name == "default":
        return name
    from orchestrator.policy.registry import POLICY_NAMES, UnknownPolicyError, make_policy

    try:
        make_policy(name)
    except UnknownPolicyError:
        raise ConfigError(f"daemon.recovery_policy (ORCH_RECOVERY_POLICY): unknown policy {name!r}; "
                          f"choose from default, {', '.join(POLICY_NAMES)}") from None
    return name


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
            flush()                     # buffered spend rows
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


def _attach_alerts(store: Store, config: OrchConfig, *, close_on_error: bool) -> None:
    """Committed events of ``store`` become webhook alerts (the config's ``alerts:``); sent from background
    workers, so no tick waits on a receiver. ``store.close()`` gives queued alerts a last bounded try."""
    from orchestrator.alerts.dispatch import attach_alerts

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
) -> Service:
    """Build the engine. Every argument overrides what the config would give; ``engine_store`` replaces the
    SQL store altogether (the in-memory store of the engine's unit tests)."""
    from orchestrator.clock import utcnow
    from orchestrator.engine.config import Deadlines, EngineConfig, EngineDeps
    from orchestrator.engine.reconciler import Reconciler
    from orchestrator.observability import DaemonMetrics
    from orchestrator.wiring import build_providers

    config = config or load_config()
    settings = settings or load_service_settings(config)
    built = dict(providers) if providers is not None else build_providers(config)
    if catalog is None:
        from providers.catalog import load_catalog

        catalog = load_catalog().offers
    opened, owner_of_leases = None, None
    if engine_store is None:
        opened, engine_store, owner_of_leases = _sql_store(config, settings, store, store_url, catalog, lease_owner)
        _attach_alerts(opened, config, close_on_error=store is None)
    metrics = metrics or DaemonMetrics()
    deadlines = Deadlines(boot_timeout=settings.boot_timeout, heartbeat_timeout=settings.heartbeat_timeout,
                          unreachable_grace=settings.unreachable_grace)
    engine_config = EngineConfig(owner=config.owner, orphan_grace=settings.orphan_grace,
                                 notice_drain=settings.notice_drain, ssh_public_key=settings.ssh_public_key,
                                 use_live_offers=settings.use_live_offers, launches_allowed=launches_allowed,
                                 deadlines=deadlines)
    hooks = _hooks(settings, built, Seams(monitor, bootstrapper, recovery, startup))
    deps = EngineDeps(store=engine_store, providers=built, catalog=tuple(catalog), config=engine_config,
                      clock=clock or utcnow, hooks=hooks, metrics=metrics)
    return Service(Reconciler(deps), engine_store, opened, built, metrics, settings, owner_of_leases)


def _sql_store(config: OrchConfig, settings: ServiceSettings, store: Store | None, store_url: str | None,
               catalog: Sequence[Offer], lease_owner: str | None) -> tuple[Store, SqlEngineStore, str | None]:
    from orchestrator.engine.sqlstore import SqlEngineStore
    from orchestrator.store.db import open_store

    opened = store or open_store(store_url)
    owner = ((default_lease_owner() if opened.dialect == "postgresql" else None) if lease_owner == AUTO
             else lease_owner)
    return opened, SqlEngineStore(opened, config.owner, catalog=catalog, lease_owner=owner,
                                  lease_ttl=settings.lease_ttl), owner


def _hooks(settings: ServiceSettings, providers: Mapping[str, Provider], given: Seams) -> EngineHooks:
    from orchestrator.engine.config import EngineHooks
    from orchestrator.engine.hooks import NoMonitor, NoStartupScript
    from orchestrator.recovery import DefaultRecoveryPolicy

    monitor, bootstrapper = given.monitor, given.bootstrapper
    if settings.ssh_private_key and (monitor is None or bootstrapper is None):
        # Over SSH: start the agent and the job on each machine, then read its status every tick. Without
        # a key orch leaves start-up to the machines' startup scripts and reads only the clouds' state.
        from pathlib import Path

        from orchestrator.config import data_dir
        from orchestrator.runtime.engine_hooks import SshBootstrapper, SshMonitor, TransportPool
        from providers.ssh.hostkeys import HostKeyStore

        pool = TransportPool(providers, key_path=Path(settings.ssh_private_key).expanduser(),
                             host_keys=HostKeyStore(data_dir() / "known_hosts"))
        monitor = monitor or SshMonitor(pool)
        bootstrapper = bootstrapper or SshBootstrapper(pool)
    startup = given.startup
    if startup is None and settings.ssh_private_key:
        startup = NoStartupScript()     # the SSH bootstrapper starts the job: booting it too would start it twice
    elif startup is None:
        from orchestrator.runtime.startup import ManifestStartupRenderer

        startup = ManifestStartupRenderer()
    recovery = given.recovery
    if recovery is None:
        recovery = DefaultRecoveryPolicy()
        if settings.recovery_policy != "default":
            from orchestrator.policy.recovery import recovery_for

            recovery = recovery_for(settings.recovery_policy,
                                    overhead_h=settings.restart_overhead.total_seconds() / 3600)
    return EngineHooks(monitor=monitor or NoMonitor(), bootstrapper=bootstrapper or _no_bootstrap(),
                       recovery=recovery, startup=startup)


def _no_bootstrap() -> Bootstrapper:
    from orchestrator.engine.hooks import NoBootstrap

    return NoBootstrap()
