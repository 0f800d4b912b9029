"""A lease owner names one daemon process: two daemons whose hostname, pid and ORCH_LEASE_OWNER are all
equal (two containers from one image, both pid 1, one environment) still never drive the same job.

The PostgreSQL part runs where ORCH_TEST_DATABASE_URL is set (skipped otherwise).
"""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from sqlmodel import select

from orchestrator.daemon.assembly import AUTO, Service, ServiceSettings, default_lease_owner
from orchestrator.store import open_store
from orchestrator.store.models import Job
from tests.daemon_world import PUBLIC_KEY, Clock, Fakes, add_job, check_invariants, service_for
from tests.test_multi_daemon_pg import Planned, tick_all


@pytest.fixture
def collide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything a lease owner used to be made of is the same for every daemon."""
    monkeypatch.setenv("ORCH_LEASE_OWNER", "trainer")
    monkeypatch.setattr("os.getpid", lambda: 1)
    monkeypatch.setattr(socket, "gethostname", lambda: "container")


def test_equal_prefix_hostname_and_pid_still_give_distinct_owners(collide: None) -> None:
    owners = {default_lease_owner() for _ in range(50)}
    assert len(owners) == 50
    assert all(o.startswith("trainer-1-") for o in owners)


def _interleave(first: Service, second: Service) -> None:
    """``second`` ticks in the middle of ``first``'s tick: after ``first`` holds its leases, before it plans its
    first launch. A second daemon that took itself for the owner of ``first``'s leases would launch too."""
    store = first.engine_store
    original = store.plan_attempt
    done: list[bool] = []

    def plan_attempt(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not done:
            done.append(True)
            second.reconciler.tick()
        return original(*args, **kwargs)

    store.plan_attempt = plan_attempt  # type: ignore[method-assign]


@pytest.mark.postgres
def test_two_daemons_with_a_forced_owner_collision_never_drive_one_job(collide: None, pg_url: str,
                                                                         fakes: Fakes) -> None:
    clock = Clock()
    settings = ServiceSettings(orphan_grace=timedelta(minutes=5), lease_ttl=timedelta(seconds=60),
                               ssh_public_key=PUBLIC_KEY)
    daemons = {name: service_for(fakes, pg_url, clock=clock, lease_owner=AUTO, settings=settings)
               for name in ("a", "b")}
    owner_of = {service.lease_owner: name for name, service in daemons.items()}
    planned = Planned()
    for name, service in daemons.items():
        planned.wrap(name, service)
    _interleave(daemons["a"], daemons["b"])
    admin = open_store(pg_url)
    try:
        jobs = [add_job(admin, f"job-{n}", providers=["lambda"]) for n in range(4)]
        clock.advance(seconds=10)
        daemons["a"].reconciler.tick()                # b ticks inside it, while a holds every lease
        tick_all(daemons, clock, rounds=3)            # then both, concurrently
        check_invariants(fakes, admin)                # no job launched twice in the cloud
        assert sorted(j for _, j, _ in planned.rows) == sorted(jobs)     # each job planned once, by one
        assert {d for d, _, _ in planned.rows} == {"a"}                  # b never touched a's leased jobs
        with admin.transaction() as tx:                                  # then the two shared them out
            owners = [owner_of[job.lease_owner] for job in tx.exec(select(Job))]
        assert sorted(owners) == ["a", "a", "b", "b"]
    finally:
        for service in daemons.values():
            service.close()
        admin.close()
