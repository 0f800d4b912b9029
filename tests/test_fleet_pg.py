"""Several daemons share one fleet on PostgreSQL (ORCH_TEST_DATABASE_URL; skipped without it): issue 21's bar
under 20% injected provider faults.

Three daemons, each its own engine, store connection, adapters and lease owner, tick against the Lambda wire
fake under one injected clock (rounds: every daemon ticks at once, started by a barrier). Nothing waits on the
wall clock. A daemon killed or paused mid-launch, as real processes, is tests/test_fleet_pg_processes.py.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import select

from orchestrator.daemon.assembly import ServiceSettings
from orchestrator.engine.states import DesiredState, JobStatus
from orchestrator.store import open_store, repo
from orchestrator.store.db import Store
from orchestrator.store.models import Job
from tests.daemon_world import PUBLIC_KEY, Clock, Fakes, add_job, check_invariants, service_for
from tests.fakes.lr_base import Reply
from tests.support.together import run_together

pytestmark = pytest.mark.postgres
TTL = timedelta(seconds=60)
STEP = 10          # seconds between rounds


class Fleet:
    def __init__(self, fakes: Fakes, url: str, names: tuple[str, ...] = ("d1", "d2", "d3")) -> None:
        self.clock = Clock()
        settings = ServiceSettings(orphan_grace=timedelta(minutes=5), lease_ttl=TTL, ssh_public_key=PUBLIC_KEY)
        self.daemons = {name: service_for(fakes, url, clock=self.clock, lease_owner=name, settings=settings)
                        for name in names}
        for service in self.daemons.values():
            service.engine_store.join(self.clock())

    def round(self) -> dict[str, BaseException]:
        """Advance the clock one step; every daemon ticks at once. Returns who raised what."""
        self.clock.advance(seconds=STEP)
        names = list(self.daemons)
        raised = run_together([self.daemons[n].reconciler.tick for n in names], start_s=60, join_s=300)
        errors = {names[i]: exc for i, exc in raised.items()}
        return errors

    def close(self) -> None:
        for service in self.daemons.values():
            service.close()


def statuses(store: Store) -> dict[int, tuple[str, str]]:
    with store.transaction() as tx:
        return {j.id or 0: (j.desired_state, j.status) for j in tx.exec(select(Job))}


def no_duplicate_launches(fakes: Fakes) -> None:
    by_launch = Counter(i.name for i in fakes.lam.instances.values())
    assert max(by_launch.values(), default=0) <= 1, [k for k, v in by_launch.items() if v > 1]


LAUNCH_FAULTS = ("ambiguous", "capacity", "500", "429")


class Faulty:
    """20% of the Lambda fake's answers fail: 500s, 429s, capacity refusals, and launches the cloud carries
    out but answers with a 500 (the ambiguous case). Seeded; the adapters do not retry."""

    def __init__(self, fakes: Fakes, rate: float = 0.2, seed: int = 21) -> None:
        self.inner = fakes.lam.handle
        self.rng = random.Random(seed)
        self.rate = rate
        self.injected = Counter[str]()
        self.launch_faults = Counter[str]()
        self.lock = threading.Lock()

    def __call__(self, method: str, path: str, body: Any, headers: dict[str, str]) -> Reply:
        with self.lock:
            roll, other = self.rng.random(), self.rng.choice(["500", "429"])
        if roll >= self.rate or path.endswith("/ssh-keys"):
            return self.inner(method, path, body, headers)
        with self.lock:         # a launch's faults take turns, so each kind happens (~13 of ~65 launches)
            kind = (LAUNCH_FAULTS[sum(self.launch_faults.values()) % len(LAUNCH_FAULTS)]
                    if path.endswith("/instance-operations/launch") else other)
            if path.endswith("/instance-operations/launch"):
                self.launch_faults[kind] += 1
            self.injected[kind] += 1
        if kind == "ambiguous":
            self.inner(method, path, body, headers)     # done in the cloud, but the answer is lost
        if kind == "429":
            return Reply(429, {"error": {"code": "global/too-many-requests", "message": "Too many requests."}})
        if kind == "capacity":
            return Reply(400, {"error": {"code": "instance-operations/launch/insufficient-capacity",
                                         "message": "Not enough capacity to fulfill launch request."}})
        return Reply(500, {"error": {"code": "global/internal-error", "message": "An internal server error."}})


@pytest.mark.slow
def test_20_percent_faults_three_daemons_50_ticks_every_job_in_its_desired_state(
        pg_url: str, fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.contract import harness_lambda

    fast = harness_lambda.fast_settings
    monkeypatch.setattr(harness_lambda, "fast_settings",
                        lambda url, **kw: fast(url, **kw).model_copy(update={"retry_attempts": 1}))
    faulty = Faulty(fakes)
    fakes.lam_server._handle = faulty
    fleet = Fleet(fakes, pg_url)
    admin = open_store(pg_url)
    try:
        names = [f"job-{n:02d}" for n in range(60)]
        for name in names:
            add_job(admin, name, providers=["lambda"])
        cut_short: Counter[str] = Counter()
        for tick in range(50):
            for exc in fleet.round().values():      # a tick a fault cut short is just a tick
                cut_short[type(exc).__name__] += 1
            if tick == 20:                           # some jobs go (orch down), some machines vanish
                with admin.transaction() as tx:
                    for name in names[:10]:
                        repo.set_desired_state(tx, name, DesiredState.DELETED, now=fleet.clock())
            if tick == 25:
                for inst in list(fakes.lam.instances.values())[:5]:
                    inst.status = "terminated"
        faulty.rate = 0.0
        for _ in range(5):                           # settle: the last faults' consequences play out
            assert fleet.round() == {}
        check_invariants(fakes, admin)               # 0 leaks, one live machine per active job
        no_duplicate_launches(fakes)
        final = statuses(admin)
        with admin.transaction() as tx:
            by_name = {j.name: j.id or 0 for j in tx.exec(select(Job))}
        for name in names[:10]:
            assert final[by_name[name]] == ("deleted", JobStatus.STOPPED.value)
        for name in names[10:]:
            assert final[by_name[name]] == ("active", JobStatus.RUNNING.value)
        assert sum(faulty.injected.values()) > 50 and set(faulty.injected) == {"500", "429", "ambiguous",
                                                                                "capacity"}
        listings = {n: p.listings for n, s in fleet.daemons.items() for p in s.reconciler.deps.providers.values()}
        assert all(v <= 55 for v in listings.values()), listings       # one listing per provider per tick
        print(f"\nfaults: {dict(faulty.injected)} over 50 ticks x 3 daemons; listings per daemon {listings}; "
              f"ticks cut short {dict(cut_short)}")
    finally:
        fleet.close()
        admin.close()
