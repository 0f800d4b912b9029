"""Row leases (PostgreSQL: SKIP LOCKED; expiry and takeover on both) and the SQLite one-daemon lock."""

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
from orchestrator.store.leases import (
    DaemonAlreadyRunningError,
    claim_jobs,
    daemon_lock,
    holds_lease,
    lock_path,
    release_leases,
    renew_leases,
)
from orchestrator.store.repo import AppliedJob
from tests._store_db import BACKENDS, database_url_for, pg_database
from tests.support.manifests import manifest

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TTL = timedelta(seconds=60)
REPO_ROOT = Path(__file__).resolve().parents[1]


def _seed(store: Store, *names: str) -> None:
    with store.transaction() as tx:
        repo.apply_jobs(tx, [AppliedJob(manifest(n), "h") for n in names])


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    for url in database_url_for(request.param, tmp_path):
        s = open_store(url)
        try:
            yield s
        finally:
            s.close()


@pytest.fixture
def pg_store() -> Iterator[Store]:
    for url in pg_database():
        s = open_store(url)
        try:
            yield s
        finally:
            s.close()


def test_claim_renew_release_and_expiry_takeover(store: Store) -> None:
    _seed(store, "a", "b", "c")
    with store.transaction() as tx:
        mine = claim_jobs(tx, "daemon-1", ttl=TTL, now=T0)
    assert [j.name for j in mine] == ["a", "b", "c"]
    assert all(holds_lease(j, "daemon-1", T0) for j in mine)
    with store.transaction() as tx:
        assert claim_jobs(tx, "daemon-2", ttl=TTL, now=T0 + timedelta(seconds=30)) == []
        renewed = renew_leases(tx, "daemon-1", [mine[0].id], ttl=TTL, now=T0 + timedelta(seconds=50))
    assert renewed == [mine[0].id]
    # b and c were not renewed: at T0+70s they have expired and daemon-2 takes them over; a has not.
    with store.transaction() as tx:
        taken = claim_jobs(tx, "daemon-2", ttl=TTL, now=T0 + timedelta(seconds=70))
    assert [j.name for j in taken] == ["b", "c"]
    with store.transaction() as tx:
        # daemon-1 finds it lost b when it tries to renew.
        assert renew_leases(tx, "daemon-1", [j.id for j in mine], now=T0 + timedelta(seconds=75)) == [mine[0].id]
        assert release_leases(tx, "daemon-2") == 2
        b = repo.require_job(tx, "b")
    assert b.lease_owner is None and b.lease_expires_at is None


def test_claim_limit_and_own_leases_are_reclaimed(store: Store) -> None:
    _seed(store, "a", "b")
    with store.transaction() as tx:
        first = claim_jobs(tx, "d1", limit=1, now=T0)
    with store.transaction() as tx:
        again = claim_jobs(tx, "d1", now=T0 + timedelta(seconds=1))
    assert [j.name for j in first] == ["a"]
    assert [j.name for j in again] == ["a", "b"]


@pytest.mark.postgres
def test_skip_locked_gives_two_sessions_different_rows(pg_store: Store) -> None:
    _seed(pg_store, "a", "b", "c")
    with Session(pg_store.engine, expire_on_commit=False) as s1, Session(pg_store.engine,
                                                                        expire_on_commit=False) as s2:
        got1 = claim_jobs(s1, "d1", limit=1, now=T0)              # s1 holds a's row lock, uncommitted
        got2 = claim_jobs(s2, "d2", limit=1, now=T0)              # s2 must not wait, and must skip a
        assert [j.name for j in got1] == ["a"]
        assert [j.name for j in got2] == ["b"]
        s2.commit()
        s1.commit()
    with pg_store.transaction() as tx:
        owners = {j.name: j.lease_owner for j in repo.list_jobs(tx)}
    assert owners == {"a": "d1", "b": "d2", "c": None}


@pytest.mark.postgres
def test_expired_lease_taken_over_while_another_session_claims(pg_store: Store) -> None:
    _seed(pg_store, "a", "b")
    with pg_store.transaction() as tx:
        claim_jobs(tx, "d1", ttl=TTL, now=T0)
    later = T0 + TTL + timedelta(seconds=1)
    with Session(pg_store.engine) as s1, Session(pg_store.engine) as s2:
        got1 = claim_jobs(s1, "d2", limit=1, now=later)
        got2 = claim_jobs(s2, "d3", limit=1, now=later)
        assert {j.name for j in got1} | {j.name for j in got2} == {"a", "b"}
        assert {j.name for j in got1}.isdisjoint({j.name for j in got2})
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
