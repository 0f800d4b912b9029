"""What an engine is built from: its settings, its seams, and the dependencies every step receives.

``orchestrator.daemon.assembly.build_service`` is the one place these are assembled (the CLI, the daemon and the
tests all build the engine there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from orchestrator.engine.hooks import (
    Bootstrapper,
    Monitor,
    NoBootstrap,
    NoMonitor,
    NoStartupScript,
    StartupRenderer,
)
from orchestrator.engine.ports import EngineStore
from orchestrator.engine.recovery_policy import DefaultRecoveryPolicy, RecoveryPolicy
from orchestrator.money.budgets import Budget
from providers.base import Offer, Provider


class _Metric(Protocol):
    """A Prometheus metric as the engine uses one (``labels(...)`` gives a child to ``inc``/``set``/``observe``)."""

    def labels(self, *values: str) -> Any: ...
    def clear(self) -> None: ...


class _Gauge(Protocol):
    def set(self, value: float) -> None: ...


class _Histogram(Protocol):
    def observe(self, amount: float) -> None: ...


class EngineMetrics(Protocol):
    """The metrics the engine's steps write. ``orchestrator.daemon.observability.DaemonMetrics`` is one; the engine
    never imports it, so it imports without prometheus_client (tests/test_engine_imports.py)."""

    @property
    def jobs(self) -> _Metric: ...
    @property
    def instances(self) -> _Metric: ...
    @property
    def burn_usd_per_hour(self) -> _Gauge: ...
    @property
    def preemptions(self) -> _Metric: ...
    @property
    def relaunch_latency(self) -> _Histogram: ...
    @property
    def idle_shutdowns(self) -> _Metric: ...
    @property
    def orphans_terminated(self) -> _Metric: ...


@dataclass(frozen=True, slots=True)
class Deadlines:
    """How long a node may go unheard before the engine ends it (orchestrator/engine/liveness.py); a job's
    manifest may set its own (``policies.boot_timeout`` ...)."""

    #: A node whose agent has not reported this long after its launch is ended and its place cooled.
    boot_timeout: timedelta = timedelta(minutes=20)
    #: An agent that reported once and has been silent this long: the node is lost.
    heartbeat_timeout: timedelta = timedelta(minutes=10)
    #: A machine the cloud lists UNREACHABLE (may come back) counts as lost after this long.
    unreachable_grace: timedelta = timedelta(minutes=10)


@dataclass(frozen=True)
class EngineConfig:
    owner: str
    orphan_grace: timedelta = timedelta(minutes=10)
    #: After a preemption NOTICE the old machine keeps running so the agent can upload its checkpoint;
    #: orch ends it after this long if the cloud has not reclaimed it by then.
    notice_drain: timedelta = timedelta(minutes=2)
    ssh_public_key: str = ""
    use_live_offers: bool = False
    #: False: the engine asks no cloud for a machine (``orch down`` tears down without launching what is
    #: pending, relaunching what was preempted, or re-asking a launch the cloud never saw).
    launches_allowed: bool = True
    #: The config's ``budgets:`` (orchestrator/money/budgets.py): checked before every launch, reviewed every tick.
    budgets: tuple[Budget, ...] = ()
    deadlines: Deadlines = field(default_factory=Deadlines)
    #: How often the sweep lists each cloud's network resources for leftovers (engine/leftovers.py).
    leftover_sweep_every: timedelta = timedelta(minutes=5)
    #: The store's identity (orchestrator/store/identity.py), carried in every launch id; the sweep ends
    #: only orphans carrying it (or none: launched before stores had identities). "": an engine with no
    #: identity (the in-memory store of unit tests): every orphan of the owner is its own, as before.
    store_id: str = ""


@dataclass(frozen=True)
class EngineHooks:
    monitor: Monitor = field(default_factory=NoMonitor)
    bootstrapper: Bootstrapper = field(default_factory=NoBootstrap)
    recovery: RecoveryPolicy = field(default_factory=DefaultRecoveryPolicy)
    startup: StartupRenderer = field(default_factory=NoStartupScript)


@dataclass(frozen=True)
class EngineDeps:
    """Long-lived: what every step may use. Per-tick facts travel separately, as ``TickFacts``."""

    store: EngineStore
    providers: Mapping[str, Provider]
    catalog: Sequence[Offer]
    config: EngineConfig
    clock: Callable[[], datetime]
    hooks: EngineHooks = field(default_factory=EngineHooks)
    metrics: EngineMetrics | None = None
