"""Several daemons share one fleet on PostgreSQL (ORCH_TEST_DATABASE_URL; skipped without it): issue 21's bar.

Three daemons, each its own engine, store connection, adapters and lease owner, tick against the Lambda wire
fake under one injected clock (rounds: every daemon ticks at once, started by a barrier). A daemon's death is
its engine abandoned mid-tick with its leases held (as SIGKILL leaves it); a pause is its tick thread held at
a named point while the clock moves past its lease (as SIGSTOP leaves it). Nothing waits on the wall clock.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import select

from orchestrator.service import Service, ServiceSettings
from orchestrator.store import open_store, repo
from orchestrator.store.db import Store
from orchestrator.store.fleet import LeaseLostError
from orchestrator.store.models import DesiredState, Job, JobStatus
from providers.base import LaunchSpec
from tests._store_db import pg_database
from tests.daemon_world import PUBLIC_KEY, Clock, Fakes, add_job, check_invariants, running_fakes, service_for
from tests.fakes.lr_base import Reply

pytestmark = pytest.mark.postgres
TTL = timedelta(seconds=60)
STEP = 10          # seconds between rounds


class Killed(BaseException):
    """The daemon dies here (not an Exception: nothing in the engine catches it)."""


class Recorder:
    """Under the fence, above the real adapter: who asked the cloud for which launch."""

    def __init__(self, name: str, inner: Any, log: list[tuple[str, str]], lock: threading.Lock) -> None:
        self.name, self.inner, self.log, self.lock = name, inner, log, lock
        self.kill_on_launch: int | None = None      # die after the cloud accepted this many launches
        self.launches = 0

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def launch(self, spec: LaunchSpec) -> Any:
        with self.lock:
            self.log.append((self.name, spec.job))
        inst = self.inner.launch(spec)
        self.launches += 1
        if self.kill_on_launch is not None and self.launches >= self.kill_on_launch:
            raise Killed(self.name)         # the cloud said yes; LAUNCHED is never written
        return inst


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from pg_database()


@pytest.fixture
def fakes() -> Iterator[Fakes]:
    with running_fakes() as f:
        yield f


class Fleet:
    def __init__(self, fakes: Fakes, url: str, names: tuple[str, ...] = ("d1", "d2", "d3")) -> None:
        self.clock = Clock()
        self.calls: list[tuple[str, str]] = []      # (daemon, job name) per launch call
        self.lock = threading.Lock()
        settings = ServiceSettings(orphan_grace=timedelta(minutes=5), lease_ttl=TTL, ssh_public_key=PUBLIC_KEY)
        self.daemons: dict[str, Service] = {}
        self.recorders: dict[str, Recorder] = {}
        for name in names:
            service = service_for(fakes, url, clock=self.clock, lease_owner=name, settings=settings)
            for provider in service.reconciler.deps.providers.values():   # the fenced providers
                rec = Recorder(name, provider._inner, self.calls, self.lock)
                provider._inner = rec
                self.recorders[name] = rec
            self.daemons[name] = service
        for service in self.daemons.values():
            service.engine_store.join(self.clock())

    def round(self, names: list[str] | None = None) -> dict[str, BaseException]:
        """Advance the clock one step; the named daemons (default all) tick at once. Returns who raised what."""
        self.clock.advance(seconds=STEP)
        chosen = [self.daemons[n] for n in (names or list(self.daemons))]
        barrier = threading.Barrier(len(chosen))
        errors: dict[str, BaseException] = {}

        def run(name: str, service: Service) -> None:
            try:
                barrier.wait(timeout=60)
                service.reconciler.tick()
            except BaseException as exc:  # surfaced to the caller
                errors[name] = exc

        threads = [threading.Thread(target=run, args=(n, self.daemons[n])) for n in (names or list(self.daemons))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        return errors

    def kill(self, name: str) -> None:
        """Gone without a word: no release, no leave; its connections dropped."""
        service = self.daemons.pop(name)
        service.store.engine.dispose() if service.store else None

    def close(self) -> None:
        for service in self.daemons.values():
            service.close()


def owners(store: Store) -> dict[int, str | None]:
    with store.transaction() as tx:
        return {j.id or 0: j.lease_owner for j in tx.exec(select(Job))}


def statuses(store: Store) -> dict[int, tuple[str, str]]:
    with store.transaction() as tx:
        return {j.id or 0: (j.desired_state, j.status) for j in tx.exec(select(Job))}


def no_duplicate_launches(fakes: Fakes) -> None:
    by_launch = Counter(i.name for i in fakes.lam.instances.values())
    assert max(by_launch.values(), default=0) <= 1, [k for k, v in by_launch.items() if v > 1]


@pytest.mark.slow
def test_300_jobs_spread_over_three_daemons_and_a_killed_ones_are_taken_over(pg_url: str, fakes: Fakes) -> None:
    fleet = Fleet(fakes, pg_url)
    admin = open_store(pg_url)
    try:
        jobs = [add_job(admin, f"job-{n:03d}", providers=["lambda"]) for n in range(300)]
        for _ in range(4):
            assert fleet.round() == {}
        launchers = {job: {d for d, j in fleet.calls if j == job} for _, job in fleet.calls}
        assert len(launchers) == 300 and all(len(d) == 1 for d in launchers.values())   # each job by one daemon
        launched_by = Counter(next(iter(d)) for d in launchers.values())
        for name in fleet.daemons:
            assert 0.2 * 300 <= launched_by[name] <= 0.5 * 300, launched_by
        held = Counter(owners(admin).values())
        assert all(0.2 * 300 <= held[name] <= 0.5 * 300 for name in fleet.daemons), held
        check_invariants(fakes, admin)

        # 30 more jobs; d1 dies in the middle of launching them: after the cloud accepted its 3rd.
        jobs += [add_job(admin, f"late-{n:02d}", now=fleet.clock(), providers=["lambda"]) for n in range(30)]
        fleet.recorders["d1"].kill_on_launch = fleet.recorders["d1"].launches + 3
        errors = fleet.round()
        assert isinstance(errors.pop("d1"), Killed) and errors == {}
        killed_at = fleet.clock()
        fleet.kill("d1")
        orphaned = {j for j, o in owners(admin).items() if o == "d1"}
        assert orphaned
        while fleet.clock() < killed_at + TTL:          # within one lease period ...
            assert fleet.round() == {}
        now_owned = owners(admin)
        assert all(now_owned[j] in ("d2", "d3") for j in orphaned)   # ... every job of d1's is taken over
        for _ in range(3):
            assert fleet.round() == {}
        check_invariants(fakes, admin)                   # 0 leaks: the clouds hold exactly the live attempts
        no_duplicate_launches(fakes)                     # 0 duplicate launches
        final = statuses(admin)
        assert {final[j] for j in jobs} == {("active", JobStatus.RUNNING.value)}      # 0 lost jobs
        print(f"\nfleet: 330 jobs; launches by daemon {dict(launched_by)}; d1 killed mid-launch holding "
              f"{len(orphaned)}; taken over by {dict(Counter(now_owned[j] for j in orphaned))}")
    finally:
        fleet.close()
        admin.close()


def test_a_paused_daemon_acts_on_nothing_after_resuming_until_it_holds_the_lease_again(
        pg_url: str, fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = Fleet(fakes, pg_url)
    admin = open_store(pg_url)
    paused, resume = threading.Event(), threading.Event()

    def crashpoint(name: str) -> None:      # d1's thread stops dead before its launch call (SIGSTOP)
        if name == "before-launch-call" and threading.current_thread().name == "d1-tick" and not paused.is_set():
            paused.set()
            assert resume.wait(timeout=120)

    monkeypatch.setattr("orchestrator.engine.launching.crashpoint", crashpoint)
    try:
        for n in range(30):
            add_job(admin, f"job-{n:02d}", providers=["lambda"])
        for _ in range(3):
            assert fleet.round() == {}
        for n in range(9):
            add_job(admin, f"more-{n}", now=fleet.clock(), providers=["lambda"])
        fleet.clock.advance(seconds=STEP)
        outcome: list[BaseException] = []

        def d1_tick() -> None:
            try:
                fleet.daemons["d1"].reconciler.tick()
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=d1_tick, name="d1-tick")
        thread.start()
        assert paused.wait(timeout=120)                  # d1 wrote LAUNCH_REQUESTED and stopped
        d1_calls = len([c for c in fleet.calls if c[0] == "d1"])
        stopped_at = fleet.clock()
        while fleet.clock() <= stopped_at + TTL:         # past its lease the others take its jobs over
            assert fleet.round(["d2", "d3"]) == {}
        assert "d1" not in set(owners(admin).values())
        resume.set()                                     # SIGCONT
        thread.join(timeout=120)
        assert len(outcome) == 1 and isinstance(outcome[0], LeaseLostError), outcome
        assert len([c for c in fleet.calls if c[0] == "d1"]) == d1_calls       # it asked the cloud for nothing
        for _ in range(3):                              # it joins again and takes a share like any other
            assert fleet.round() == {}
        assert "d1" in set(owners(admin).values())
        check_invariants(fakes, admin)
        no_duplicate_launches(fakes)
        assert {s for s in statuses(admin).values()} == {("active", JobStatus.RUNNING.value)}
    finally:
        resume.set()
        fleet.close()
        admin.close()


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
