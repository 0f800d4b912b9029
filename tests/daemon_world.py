"""A world for daemon tests: the Vast.ai and Lambda wire fakes with their REAL adapters, a SQL store,
an injected clock, a scripted monitor, jobs applied from real manifests, and the invariant checks
(every cloud holds exactly what the store says; one live attempt per active job; no leak)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, ServiceSettings, build_service
from orchestrator.engine.hooks import AgentReport, Monitor
from orchestrator.engine.states import AttemptState
from orchestrator.store import open_store, repo
from orchestrator.store.db import Store
from orchestrator.store.models import Attempt, InstanceRow, Job
from providers.base import Availability, Instance, Interconnect, LaunchSpec, Market, Offer, OfferOrigin, new_launch_id
from providers.lambdalabs.adapter import LambdaProvider
from providers.vastai.adapter import VastProvider
from tests.contract import harness_lambda, harness_vastai
from tests.fakes.lambda_cloud import LambdaFake, start_lambda_fake
from tests.fakes.vast import VastFake
from tests.support.clock import ManualClock as Clock

OWNER = "tester"
PUBLIC_KEY = harness_lambda.PUBLIC_KEY
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

#: Vast spot A100-80G in Bavaria (the fake's ask 7002001) is the cheapest; Lambda's 1x A100 (40 GB) in
#: us-west-2 is the next eligible offer, on another provider. Priced as the catalog refresh prices the ask (its bid,
#: min_bid $0.62 x 1.1, plus 100 GB of disk at $0.15/GB/month): a catalog offer is never rented dearer than quoted.
VAST_BAVARIA = Offer("vastai", "1x-A100_SXM4-32-257000", "Bavaria, DE", None, "A100-80G", 1, 80, 32, 251,
                     Interconnect.PCIE, Market.SPOT, 0.702833, date(2026, 12, 1), True, OfferOrigin.CATALOG,
                     Availability.AVAILABLE, offer_id="7002001")
LAMBDA_A100 = Offer("lambda", "gpu_1x_a100_sxm4", "us-west-2", None, "A100-40G", 1, 40, 30, 200,
                    Interconnect.PCIE, Market.ON_DEMAND, 1.29, date(2026, 12, 1), True, OfferOrigin.CATALOG,
                    Availability.AVAILABLE)
CATALOG = [VAST_BAVARIA, LAMBDA_A100]
GPUS = ["A100-80G", "A100-40G"]



class ScriptedMonitor(Monitor):
    """The agent's answers, per cloud instance id (GPU utilisation, notices, checkpoints)."""

    def __init__(self) -> None:
        self.reports: dict[str, AgentReport] = {}

    def read(self, job, attempt, instance):  # type: ignore[no-untyped-def]
        return self.reports.get(instance.instance_id)


@dataclass
class Fakes:
    vast: VastFake
    vast_url: str
    lam: LambdaFake
    lam_server: Any
    providers: dict[str, Any] = field(default_factory=dict)

    @property
    def lambda_url(self) -> str:
        return f"{self.lam_server.url}/api/v1"

    def build_providers(self) -> dict[str, Any]:
        """Fresh adapters (a daemon process would build its own)."""
        return {"vastai": VastProvider(harness_vastai.fast_settings(self.vast_url)),
                "lambda": LambdaProvider(harness_lambda.fast_settings(self.lambda_url), catalog=())}

    def config_yaml(self) -> str:
        """orch's config for a subprocess pointing at these fakes (same settings as the adapters here)."""
        return (f"owner: {OWNER}\n"
                "providers:\n"
                f"  vastai: {{api_key: vast-test-key, base_url: '{self.vast_url}', min_interval_s: 0,\n"
                "           retry_attempts: 4, retry_initial_wait_s: 0.001, retry_max_wait_s: 0.01}\n"
                f"  lambda: {{api_key: test-key, base_url: '{self.lambda_url}', min_interval_s: 0,\n"
                "           launch_interval_s: 0, retry_attempts: 4, retry_initial_wait_s: 0.001,\n"
                "           retry_max_wait_s: 0.01}\n"
                f"daemon: {{ssh_public_key: '{PUBLIC_KEY}'}}\n")

    def live_instances(self) -> dict[str, list[Instance]]:
        """What each cloud holds for OWNER right now, read through fresh adapters: not gone, and not already
        accepted for termination (Lambda lists a machine as "terminating" for a while)."""
        out: dict[str, list[Instance]] = {}
        for name, p in self.build_providers().items():
            out[name] = [i for i in p.list_instances(OWNER) if not i.state.is_gone and i.raw_state != "terminating"]
            p.close()
        return out

    def plant_orphan(self, provider: str) -> str:
        """An instance tagged as orch's (owner + a launch id the store never wrote); returns its id."""
        p = self.build_providers()[provider]
        offer = VAST_BAVARIA if provider == "vastai" else LAMBDA_A100
        inst = p.launch(LaunchSpec(new_launch_id(), OWNER, "ghost", offer, ssh_public_key=PUBLIC_KEY))
        return str(inst.instance_id)


@contextmanager
def running_fakes() -> Iterator[Fakes]:
    vast = VastFake()
    vast_url = vast.start()
    lam, server = start_lambda_fake()
    try:
        yield Fakes(vast, vast_url, lam, server)
    finally:
        vast.stop()
        server.stop()


def manifest_doc(name: str, *, gpus: list[str] | None = None, count: int = 1, market: str = "auto",
                 providers: list[str] | None = None, idle_pct: float = 5, idle_window: str = "10m",
                 cooldown: str = "30m", idle_action: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "orch/v1", "kind": "Job", "name": name,
        "resources": {"gpu": gpus or GPUS, "count": count}, "market": market,
        "run": {"launcher": "command", "command": "python train.py"},
        "policies": {"estimated_hours": 2, "preempted_zone_cooldown": cooldown,
                     "idle": {"min_gpu_util_pct": idle_pct, "window": idle_window}},
    }
    if providers:
        doc["providers"] = {"allow": providers}
    if idle_action:
        doc["policies"]["idle"]["action"] = idle_action
    return doc


def add_job(store: Store, name: str, now: datetime = T0, **kw: Any) -> int:
    from orchestrator.manifest.schema import Manifest

    m = Manifest.model_validate(manifest_doc(name, **kw))
    with store.transaction() as tx:
        repo.apply_jobs(tx, [repo.AppliedJob(m, "h-" + m.name)], now=now)
        return repo.require_job(tx, name).id or 0


def service_for(fakes: Fakes, store_url: str, *, clock: Clock | None = None, monitor: Monitor | None = None,
                catalog: list[Offer] | None = None, lease_owner: str | None = None,
                settings: ServiceSettings | None = None) -> Service:
    return build_service(
        config=OrchConfig(owner=OWNER), store=open_store(store_url), providers=fakes.build_providers(),
        catalog=CATALOG if catalog is None else catalog, clock=clock, monitor=monitor, lease_owner=lease_owner,
        settings=settings or ServiceSettings(orphan_grace=timedelta(0), ssh_public_key=PUBLIC_KEY))


# --- invariants ----------------------------------------------------------------------------------------
@dataclass
class StoreView:
    live_attempts: list[Attempt]
    instances: dict[str, InstanceRow]      # launch id -> row
    jobs: list[Job]


def store_view(store: Store) -> StoreView:
    from sqlmodel import select

    live = [s.value for s in AttemptState if s.is_live]
    with store.transaction() as tx:
        attempts = [a for a in tx.exec(select(Attempt)) if a.state in live]
        rows = {r.launch_id: r for r in tx.exec(select(InstanceRow))}
        jobs = list(tx.exec(select(Job)))
    return StoreView(attempts, rows, jobs)


def check_invariants(fakes: Fakes, store: Store) -> None:
    """Every cloud holds exactly the instances of the store's live attempts; one per active job."""
    view = store_view(store)
    clouds = fakes.live_instances()
    held = {(name, i.launch_id) for name, insts in clouds.items() for i in insts}
    launch_ids = [i.launch_id for insts in clouds.values() for i in insts]
    assert len(launch_ids) == len(set(launch_ids)), f"duplicate launch in the clouds: {sorted(launch_ids)}"
    expected = {(view.instances[a.launch_id].provider, a.launch_id) for a in view.live_attempts}
    assert held == expected, f"clouds {sorted(held)} != store {sorted(expected)}"
    per_job: dict[int, int] = {}
    for a in view.live_attempts:
        per_job[a.job_id] = per_job.get(a.job_id, 0) + 1
    for job in view.jobs:
        if job.desired_state == "active":
            assert per_job.get(job.id or 0) == 1, f"job {job.name}: {per_job.get(job.id or 0, 0)} live attempts"
