"""The daemon's settings: ``ServiceSettings``, read from the config's ``daemon:`` section.

Engine knobs live in an optional ``daemon:`` section of the config file, each overridable by an env var
(handy for subprocess tests and containers)::

    daemon:
      orphan_grace_s: 600       # ORCH_ORPHAN_GRACE_S: a tagged instance unknown to the store lives this long
      notice_drain_s: 120       # ORCH_NOTICE_DRAIN_S: a noticed machine keeps running this long to upload
      lease_ttl_s: 90           # ORCH_LEASE_TTL_S: a daemon silent this long loses its jobs (PostgreSQL)
      use_live_offers: false    # ORCH_USE_LIVE_OFFERS: merge providers' live prices into the catalog
      ssh_public_key: "ssh-ed25519 ..."   # ORCH_SSH_PUBLIC_KEY: put on every launched machine
      recovery_policy: orch     # ORCH_RECOVERY_POLICY: a policy of `orch simulate` (orch, uniform-progress,
                                #   greedy, on-demand) for jobs with a deadline and an estimate, or default
      restart_overhead_s: 720   # ORCH_RESTART_OVERHEAD_S: what one restart costs (boot, setup, restore)
      state_store: s3://bucket/orch-state   # ORCH_STATE_STORE: where agents of jobs without a checkpoint
                                #   store report (status, heartbeat, notices, logs)
      store_endpoint: ""        # ORCH_STORE_ENDPOINT: an S3-compatible endpoint for s3:// stores
      boot_timeout_s: 1200      # ORCH_BOOT_TIMEOUT_S: a node whose agent never reported this long after launch
                                #   is ended and the job relaunched elsewhere
      heartbeat_timeout_s: 600  # ORCH_HEARTBEAT_TIMEOUT_S: an agent silent this long: the node is lost
      unreachable_grace_s: 600  # ORCH_UNREACHABLE_GRACE_S: a machine its cloud lists unreachable is lost after this
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from orchestrator.config.errors import ConfigError
from orchestrator.config.file import OrchConfig

__all__ = ["ServiceSettings", "load_service_settings"]


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
    #: Who decides after a preemption and as a deadline nears, for jobs with a deadline and an estimate:
    #: orch's spot policy (docs/policy.md); "default" is the plain relaunch-at-once rule.
    recovery_policy: str = "orch"
    restart_overhead: timedelta = timedelta(minutes=12)
    #: Where agents of jobs without a checkpoint store report (s3://, gs://, az://, a path); empty: nowhere
    #: (such a job is read over SSH, or only through its cloud's state).
    state_store: str = ""
    #: An S3-compatible endpoint (MinIO, R2) for s3:// stores, used by nodes and the daemon alike.
    store_endpoint: str = ""
    #: The liveness deadlines (orchestrator/engine/liveness.py); a job's manifest may set its own.
    boot_timeout: timedelta = timedelta(minutes=20)
    heartbeat_timeout: timedelta = timedelta(minutes=10)
    unreachable_grace: timedelta = timedelta(minutes=10)


def _daemon_section(config: OrchConfig) -> dict[str, Any]:
    """The ``daemon:`` section as read with the rest of the file (``load_config`` reads it once)."""
    section = config.sections.get("daemon")
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise config.source().error(("daemon",), "must be a mapping")
    return dict(section)


def load_service_settings(config: OrchConfig) -> ServiceSettings:
    """The ``daemon:`` section of the config, each key overridden by its env var when set
    (orchestrator/config/daemon.py)."""
    from orchestrator.config.daemon import read_daemon_section

    d = read_daemon_section(_daemon_section(config), config.source())
    base = ServiceSettings()
    return ServiceSettings(
        orphan_grace=d.orphan_grace_s if d.orphan_grace_s is not None else base.orphan_grace,
        notice_drain=d.notice_drain_s if d.notice_drain_s is not None else base.notice_drain,
        lease_ttl=d.lease_ttl_s if d.lease_ttl_s is not None else base.lease_ttl,
        use_live_offers=d.use_live_offers,
        ssh_public_key=_public_key(d.ssh_public_key),
        ssh_private_key=d.ssh_private_key,
        recovery_policy=_policy_name(d.recovery_policy),
        restart_overhead=d.restart_overhead_s if d.restart_overhead_s is not None else base.restart_overhead,
        state_store=d.state_store,
        store_endpoint=d.store_endpoint,
        boot_timeout=d.boot_timeout_s if d.boot_timeout_s is not None else base.boot_timeout,
        heartbeat_timeout=d.heartbeat_timeout_s if d.heartbeat_timeout_s is not None else base.heartbeat_timeout,
        unreachable_grace=d.unreachable_grace_s if d.unreachable_grace_s is not None else base.unreachable_grace,
    )


def _public_key(value: object) -> str:
    """``daemon.ssh_public_key``: the key itself or the path of a .pub file, checked (never a path sent as
    the key)."""
    from orchestrator.config.public_key import PublicKeyError, public_key

    try:
        return public_key(str(value or ""), source="daemon.ssh_public_key (ORCH_SSH_PUBLIC_KEY)")
    except PublicKeyError as exc:
        raise ConfigError(str(exc)) from None


def _policy_name(value: object) -> str:
    name = str(value or ServiceSettings.recovery_policy).strip().lower()
    if name == "default":
        return name
    from orchestrator.policy.registry import POLICY_NAMES, UnknownPolicyError, make_policy

    try:
        make_policy(name)
    except UnknownPolicyError:
        raise ConfigError(f"daemon.recovery_policy (ORCH_RECOVERY_POLICY): unknown policy {name!r}; "
                          f"choose from default, {', '.join(POLICY_NAMES)}") from None
    return name
