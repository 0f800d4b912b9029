"""Leases: the fleet registry, shares, takeover after a lapse, SKIP LOCKED claims, the fence (PostgreSQL and
SQLite alike where the SQL is the same), and the SQLite one-daemon lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import Session

from orchestrator.store import repo
from orchestrator.store.db import Store, open_store
from orchestrator.store.fleet import (
    LeaseLostError,
    claim_free,
    fence_job,
    heartbeat,
    leave,
    reap,
    take_share,
)
from orchestrator.store.leases import DaemonAlreadyRunningError, daemon_lock, lock_path
from orchestrator.store.repo import AppliedJob
from tests._store_db import BACKENDS, open_test_store, pg_database
from tests.support.manifests import manifest

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)
REPO_ROOT = Path(__file__).resolve().parents[1]


def _seed(store: Store, *names: str) -> None:
    with store.transaction() as tx:
        repo.apply_jobs(tx, [AppliedJob(manifest(n), "h-" + n) for n in names])


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from open_test_store(request.param, tmp_path)


@pytest.fixture
def pg_store() -> Iterator[Store]:
    for url in pg_database():
        s = open_store(url)
        try:
            yield s
        finally:
            s.close()


def _owners(store: Store) -> dict[str, str | None]:
    with store.transaction() as tx:
        return {j.name: j.lease_owner for j in repo.list_jobs(tx)}


def test_shares_spread_jobs_and_rebalance_on_join_and_lapse(store: Store) -> None:
    _seed(store, *[f"j{i}" for i in range(10)])
    with store.transaction() as tx:
        a = take_share(tx, "a", None, ttl=TTL, now=T0)
    assert len(a.jobs) == 10 and a.share == 10 and a.live_daemons == 1
    with store.transaction() as tx:                       # b joins: share 5; a still holds all 10
        b = take_share(tx, "b", None, ttl=TTL, now=T0 + timedelta(seconds=1))
    assert b.share == 5 and b.jobs == {}
    with store.transaction() as tx:                       # a gives back its excess ...
        a = take_share(tx, "a", a.epoch, ttl=TTL, now=T0 + timedelta(seconds=2))
    assert len(a.jobs) == 5 and a.released == 5
    with store.transaction() as tx:                       # ... and b takes it, each claim a new generation
        b = take_share(tx, "b", b.epoch, ttl=TTL, now=T0 + timedelta(seconds=3))
    assert len(b.jobs) == 5 and set(b.jobs).isdisjoint(a.jobs) and set(b.jobs.values()) == {2}
    # b falls silent: after its registration lapses, a reaps it and takes its jobs over.
    later = T0 + timedelta(seconds=3) + TTL
    with store.transaction() as tx:
        a = take_share(tx, "a", a.epoch, ttl=TTL, now=later)
    assert len(a.jobs) == 10 and a.live_daemons == 1
    assert set(_owners(store).values()) == {"a"}


def test_a_lapsed_daemon_comes_back_with_a_new_epoch_and_void_leases(store: Store) -> None:
    _seed(store, "x", "y")
    with store.transaction() as tx:
        first = take_share(tx, "a", None, ttl=TTL, now=T0)
    late = T0 + TTL + timedelta(seconds=1)
    with store.transaction() as tx:                       # nobody reaped it, but its registration lapsed
        again = take_share(tx, "a", first.epoch, ttl=TTL, now=late)
    assert again.epoch != first.epoch
    assert all(again.jobs[j] == first.jobs[j] + 1 for j in first.jobs)     # taken again: new generations
    with store.transaction() as tx, pytest.raises(LeaseLostError):
        fence_job(tx, "a", first.epoch, next(iter(first.jobs)), first.jobs[next(iter(first.jobs))], late)


def test_the_fence_refuses_after_a_takeover(store: Store) -> None:
    _seed(store, "x")
    with store.transaction() as tx:
        a = take_share(tx, "a", None, ttl=TTL, now=T0)
    [(job, gen)] = a.jobs.items()
    with store.transaction() as tx:
        fence_job(tx, "a", a.epoch, job, gen, T0 + timedelta(seconds=5))       # holds
    with store.transaction() as tx:
        b = take_share(tx, "b", None, ttl=TTL, now=T0 + TTL + timedelta(seconds=1))
    assert b.jobs == {job: gen + 1}
    for when in (T0 + timedelta(seconds=5), T0 + TTL + timedelta(seconds=2)):   # even at a stale clock
        with store.transaction() as tx, pytest.raises(LeaseLostError):
            fence_job(tx, "a", a.epoch, job, gen, when)
    with store.transaction() as tx:
        assert leave(tx, "b") == 1
    assert _owners(store) == {"x": None}


def test_finished_jobs_need_no_driver(store: Store) -> None:
    from orchestrator.engine.states import JobStatus

    _seed(store, "done", "todo")
    with store.transaction() as tx:
        repo.set_job_status(tx, repo.require_job(tx, "done").id or 0, JobStatus.SUCCEEDED, now=T0)
    with store.transaction() as tx:
        held = take_share(tx, "a", None, ttl=TTL, now=T0)
    assert held.share == 1 and _owners(store) == {"done": None, "todo": "a"}


@pytest.mark.postgres
def test_skip_locked_gives_two_claimers_different_rows(pg_store: Store) -> None:
    _seed(pg_store, "a", "b", "c")
    with Session(pg_store.engine, expire_on_commit=False) as s1, Session(pg_store.engine,
                                                                        expire_on_commit=False) as s2:
        heartbeat(s1, "d1", None, ttl=TTL, now=T0)
        heartbeat(s2, "d2", None, ttl=TTL, now=T0)
        got1 = claim_free(s1, "d1", 1)             # s1 holds a's row lock, uncommitted
        got2 = claim_free(s2, "d2", 1)             # s2 must not wait, and must skip a
        assert len(got1) == len(got2) == 1 and set(got1).isdisjoint(got2)
        s2.commit()
        s1.commit()
    assert sorted(o for o in _owners(pg_store).values() if o) == ["d1", "d2"]


@pytest.mark.postgres
def test_a_reaper_leaves_a_daemon_whose_fenced_write_is_in_flight(pg_store: Store) -> None:
    _seed(pg_store, "a")
    with pg_store.transaction() as tx:
        held = take_share(tx, "d1", None, ttl=TTL, now=T0)
    [(job, gen)] = held.jobs.items()
    later = T0 + TTL + timedelta(seconds=1)
    with Session(pg_store.engine) as writer, Session(pg_store.engine) as reaper:
        fence_job(writer, "d1", held.epoch, job, gen, T0 + timedelta(seconds=30))   # FOR SHARE, uncommitted
        assert reap(reaper, later) == 0             # skipped, not waited for: its write commits first
        assert claim_free(reaper, "d2", 1) == {}    # so its job is not free either
        reaper.rollback()
        writer.commit()
        assert reap(reaper, later) == 1
        assert claim_free(reaper, "d2", 1) == {job: gen + 1}
        reaper.commit()


@pytest.mark.postgres
def test_daemons_lapsing_together_reap_without_deadlock(pg_store: Store) -> None:
    _seed(pg_store, "a", "b")
    with pg_store.transaction() as tx:
        e1, _ = heartbeat(tx, "d1", None, ttl=TTL, now=T0)
        e2, _ = heartbeat(tx, "d2", None, ttl=TTL, now=T0)
    later = T0 + TTL
    with Session(pg_store.engine) as s1, Session(pg_store.engine) as s2:
        heartbeat(s1, "d1", e1, ttl=TTL, now=later)      # each holds its own row and reaps the other's
        heartbeat(s2, "d2", e2, ttl=TTL, now=later)
        assert reap(s1, later, keep="d1") == 0 and reap(s2, later, keep="d2") == 0
        s1.commit()
        s2.commit()


def test_daemon_lock_refuses_a_second_daemon_on_sqlite(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db' / 'orch.db'}")
    try:
        path = lock_path(store)
        assert path is not None and path.name == "orch.db.lock"
        pattern = r"another orch daemon \(pid \d+\).*PostgreSQL"
        with daemon_lock(store), pytest.raises(DaemonAlreadyRunningError, match=pattern), daemon_lock(store):
            pass
        with daemon_lock(store):   # released: it can be taken again
            pass
    finally:
        store.close()


def test_daemon_lock_held_by_another_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db' / 'orch.db'}"
    store = open_store(url)
    child = textwrap.dedent(f"""
        import sys
        from orchestrator.store.db import open_store
        from orchestrator.store.leases import daemon_lock
        with daemon_lock(open_store({url!r})):
            print("locked", flush=True)
            sys.stdin.readline()
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], cwd=REPO_ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with pytest.raises(DaemonAlreadyRunningError, match=rf"pid {proc.pid}\b"), daemon_lock(store):
            pass
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        store.close()
    with daemon_lock(open_store(url)):   # the lock went with the process
        pass


def test_daemon_lock_is_a_no_op_for_postgresql(pg_store: Store) -> None:
    assert lock_path(pg_store) is None
    with daemon_lock(pg_store), daemon_lock(pg_store):
        pass


@pytest.mark.postgres
def test_a_daemon_stopped_inside_a_write_does_not_stall_the_others(pg_store: Store,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """d1 lapses while its fenced write is open (SIGSTOP mid-transaction): d2's tick goes on without its jobs
    (the reaper's wait is bounded), and takes them once the write is over."""
    from orchestrator.store import fleet_member

    monkeypatch.setattr(fleet_member, "REAP_WAIT_MS", 100)
    _seed(pg_store, "a", "b")
    with pg_store.transaction() as tx:
        held = take_share(tx, "d1", None, ttl=TTL, now=T0)
    later = T0 + TTL + timedelta(seconds=1)
    d2 = fleet_member.FleetMember("d2", TTL, clock=lambda: later)
    with Session(pg_store.engine) as writer:
        job, gen = next(iter(held.jobs.items()))
        fence_job(writer, "d1", held.epoch, job, gen, T0 + timedelta(seconds=30))     # open, FOR SHARE
        assert d2.begin(pg_store, later).jobs == {}          # returned: it waited 100 ms, not for ever
        writer.rollback()
    assert set(d2.begin(pg_store, later).jobs) == set(held.jobs)
