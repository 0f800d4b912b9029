"""Three daemons on one PostgreSQL store (ORCH_TEST_DATABASE_URL; skipped without it), each its own engine,
store connection, adapters and lease owner, ticking concurrently in threads against the wire fakes with
one injected clock: no job is handled twice (one launch per job, each job's attempts planned by the
daemon holding its lease); one daemon dies, and after its leases expire the others take its jobs over."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlmodel import select

from orchestrator.daemon.assembly import Service, ServiceSettings
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.store import open_store
from orchestrator.store.models import Attempt, Job
from tests.daemon_world import PUBLIC_KEY, Clock, Fakes, add_job, check_invariants, service_for
from tests.support.together import run_together

pytestmark = pytest.mark.postgres
TTL = timedelta(seconds=60)


class Planned:
    """Who planned which attempt: (daemon, job id, launch id), recorded at the engine store."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, str]] = []
        self.lock = threading.Lock()

    def wrap(self, name: str, service: Service) -> None:
        store = service.engine_store
        original = store.plan_attempt

        def plan_attempt(job_id, offer, launch_id, checkpoint, now):  # type: ignore[no-untyped-def]
            assert store.fleet.holds(job_id), f"{name} planned job {job_id} without holding its lease"
            with self.lock:
                self.rows.append((name, job_id, launch_id))
            return original(job_id, offer, launch_id, checkpoint, now)

        store.plan_attempt = plan_attempt  # type: ignore[method-assign]


def tick_all(daemons: dict[str, Service], clock: Clock, rounds: int) -> None:
    """``rounds`` rounds; in each, every daemon ticks at once (a barrier starts them together)."""
    for _ in range(rounds):
        clock.advance(seconds=10)
        errors = run_together([s.reconciler.tick for s in daemons.values()])
        assert not errors, errors


def lease_owners(url: str) -> dict[str, str | None]:
    store = open_store(url)
    try:
        with store.transaction() as tx:
            return {j.name: j.lease_owner for j in tx.exec(select(Job))}
    finally:
        store.close()


def test_three_daemons_share_jobs_without_doing_one_twice_and_take_over_a_dead_ones(pg_url: str,
                                                                                     fakes: Fakes) -> None:
    clock = Clock()
    settings = ServiceSettings(orphan_grace=timedelta(minutes=5), lease_ttl=TTL, ssh_public_key=PUBLIC_KEY)
    daemons = {name: service_for(fakes, pg_url, clock=clock, lease_owner=name, settings=settings)
               for name in ("d1", "d2", "d3")}
    planned = Planned()
    for name, service in daemons.items():
        planned.wrap(name, service)
    admin = open_store(pg_url)
    try:
        jobs = [add_job(admin, f"job-{n}", providers=["lambda"]) for n in range(6)]
        tick_all(daemons, clock, rounds=4)
        check_invariants(fakes, admin)
        assert sorted(j for _, j, _ in planned.rows) == sorted(jobs)       # one launch per job, by one daemon
        owners = lease_owners(pg_url)
        assert set(owners.values()) <= set(daemons)
        with admin.transaction() as tx:       # each planned by the daemon holding it then (Planned checks)
            for job in tx.exec(select(Job)):
                assert JobStatus(job.status) is JobStatus.RUNNING

        # The daemon holding the most jobs dies (no release: as if SIGKILLed).
        dead = max(daemons, key=lambda d: sum(1 for o in owners.values() if o == d))
        orphaned_jobs = {n for n, o in owners.items() if o == dead}
        daemons.pop(dead).close()
        # Its machines lose their instance (terminated behind orch's back): someone must relaunch them.
        with admin.transaction() as tx:
            ids = {j.id for j in tx.exec(select(Job)) if j.name in orphaned_jobs}
            theirs = {a.launch_id for a in tx.exec(select(Attempt))
                      if a.job_id in ids and AttemptState(a.state).is_live}
        lost = [i for i in fakes.live_instances()["lambda"] if i.launch_id in theirs]
        assert lost and len(lost) == len(orphaned_jobs)
        for inst in lost:
            fakes.build_providers()["lambda"].terminate(inst.instance_id)
        before = len(planned.rows)
        tick_all(daemons, clock, rounds=2)                 # leases not yet expired: nobody touches them
        assert len(planned.rows) == before
        clock.advance(seconds=TTL.total_seconds())
        tick_all(daemons, clock, rounds=5)
        owners = lease_owners(pg_url)
        assert dead not in owners.values()
        assert {owners[n] for n in orphaned_jobs} <= set(daemons)
        relaunched = planned.rows[before:]
        assert len(relaunched) == len(lost) and {d for d, _, _ in relaunched} <= set(daemons)
        assert len({j for _, j, _ in relaunched}) == len(relaunched)       # each taken-over job launched once
        check_invariants(fakes, admin)
        print(f"\nmulti-daemon: {len(jobs)} jobs; {dead} died holding {len(orphaned_jobs)}; "
              f"{len(relaunched)} relaunched by {sorted({d for d, _, _ in relaunched})} after lease expiry")
    finally:
        for service in daemons.values():
            service.close()
        admin.close()
