"""The store's operations, on SQLite and (with ORCH_TEST_DATABASE_URL) PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.exc import IntegrityError

from orchestrator.engine.events import EventKind
from orchestrator.engine.states import AttemptState, DesiredState, JobStatus
from orchestrator.manifest import load_manifests
from orchestrator.store import repo
from orchestrator.store.db import Store, StoreError, current_revision, database_url, head_revision, open_store
from orchestrator.store.models import Job
from orchestrator.store.repo import AppliedJob, Change, InstanceRecord, InvalidTransitionError
from providers.base import InstanceState, Market
from tests._store_db import BACKENDS, open_test_store
from tests.support.manifests import manifest

#: A new store is made by open_store's own migrations here (no template store: tests/support/schema_template.py).
pytestmark = pytest.mark.real_schema_upgrade

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from open_test_store(request.param, tmp_path)


def _spec(name: str, hash_: str = "h1", source: str = "jobs/a.yaml") -> AppliedJob:
    return AppliedJob(manifest(name), hash_, source)


def _snapshot(store: Store) -> list[tuple[str, str, str]]:
    with store.transaction() as tx:
        return [(j.name, j.manifest_hash, j.desired_state) for j in repo.list_jobs(tx, include_deleted=True)]


def test_new_sqlite_database_is_created_at_the_default_path_and_upgraded() -> None:
    url = database_url()
    assert url.endswith("/orch/orch.db")   # in the test's XDG_DATA_HOME (tests/conftest.py)
    s = open_store()
    try:
        assert current_revision(s.engine) == head_revision()
        assert Path(s.engine.url.database or "").exists()
    finally:
        s.close()


def test_database_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_DATABASE_URL", "postgresql+psycopg://u@h/d")
    assert database_url() == "postgresql+psycopg://u@h/d"


def test_unsupported_database_is_refused_clearly() -> None:
    with pytest.raises(StoreError, match="SQLite or PostgreSQL"):
        open_store("mysql://user@host/db")


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "sqlite:///:memory:"])
def test_an_in_memory_store_is_refused(url: str) -> None:
    """`ORCH_DATABASE_URL=sqlite://` opened a store in memory: `orch apply --yes` launched a machine, the command
    ended, and nothing anywhere recorded it (no other store's orch ends its machines): it billed on."""
    with pytest.raises(StoreError, match=r"names no file: an in-memory store forgets every job and machine"):
        open_store(url)


def test_apply_creates_updates_and_leaves_unchanged(store: Store) -> None:
    with store.transaction() as tx:
        result = repo.apply_jobs(tx, [_spec("a"), _spec("b")], now=T0)
    assert result.created == ("a", "b")
    with store.transaction() as tx:
        result = repo.apply_jobs(tx, [_spec("a"), _spec("b", "h2")], now=T0 + timedelta(hours=1))
    assert result.unchanged == ("a",) and result.updated == ("b",)
    with store.transaction() as tx:
        b = repo.require_job(tx, "b")
        kinds = [e.kind for e in repo.list_events(tx, job_id=b.id)]
    assert b.manifest_hash == "h2"
    assert b.applied_at == T0 + timedelta(hours=1)
    assert b.created_at == T0 and b.created_at.tzinfo is not None
    assert kinds == ["job.created", "job.updated"]


def test_apply_with_prune_marks_missing_jobs_and_reapply_revives(store: Store) -> None:
    with store.transaction() as tx:
        repo.apply_jobs(tx, [_spec("a"), _spec("b")])
    with store.transaction() as tx:
        repo.set_job_status(tx, repo.require_job(tx, "b"), JobStatus.SUCCEEDED)
        result = repo.apply_jobs(tx, [_spec("a")], prune=True)
    assert result.pruned == ("b",)
    assert _snapshot(store) == [("a", "h1", "active"), ("b", "h1", "pruned")]
    with store.transaction() as tx:
        result = repo.apply_jobs(tx, [_spec("a"), _spec("b")])
        b = repo.require_job(tx, "b")
    assert result.changes["b"] is Change.UPDATED
    assert (b.desired_state, b.status) == (DesiredState.ACTIVE.value, JobStatus.PENDING.value)


def test_failed_multi_job_apply_leaves_the_store_unchanged(store: Store) -> None:
    with store.transaction() as tx:
        repo.apply_jobs(tx, [_spec("a"), _spec("b")])
    before = _snapshot(store)
    with pytest.raises(RuntimeError, match="planner failed"), store.transaction() as tx:
        repo.apply_jobs(tx, [_spec("a", "h9"), _spec("c")], prune=True)
        active = {j.name for j in repo.list_jobs(tx, desired_states=[DesiredState.ACTIVE])}
        assert active == {"a", "c"}                                     # written inside the transaction...
        raise RuntimeError("planner failed")
    assert _snapshot(store) == before                                   # ...and none of it kept
    with store.transaction() as tx:
        assert repo.list_events(tx, kinds=["job.updated", "job.pruned"]) == []


def test_a_database_error_midway_rolls_back_the_whole_apply(store: Store) -> None:
    with store.transaction() as tx:
        repo.apply_jobs(tx, [_spec("a")])
    before = _snapshot(store)
    with pytest.raises(IntegrityError), store.transaction() as tx:
        repo.apply_jobs(tx, [_spec("a", "h2"), _spec("b")])
        tx.add(Job(name="b", manifest={}, manifest_hash="x"))   # a second row named b: the database refuses
        tx.flush()
    assert _snapshot(store) == before


def test_duplicate_names_in_one_apply_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="twice"), store.transaction() as tx:
        repo.apply_jobs(tx, [_spec("a"), _spec("a", "h2")])
    assert _snapshot(store) == []


def test_examples_round_trip_through_the_store(store: Store) -> None:
    from orchestrator.manifest import Manifest

    loaded = load_manifests([EXAMPLES])
    with store.transaction() as tx:
        repo.apply_jobs(tx, [AppliedJob.from_loaded(*item) for item in loaded])
    with store.transaction() as tx:
        for item in loaded:
            job = repo.require_job(tx, item.manifest.name)
            assert Manifest.model_validate(job.manifest) == item.manifest
            assert job.manifest_hash == item.content_hash
            assert job.source_path == str(item.source)


def test_attempt_state_machine(store: Store) -> None:
    with store.transaction() as tx:
        job, _ = repo.upsert_job(tx, _spec("a"))
        assert job.id is not None
        attempt = repo.create_attempt(tx, job.id, "l000000000001", generation=0, node_rank=0, now=T0)
    steps = [AttemptState.LAUNCH_REQUESTED, AttemptState.LAUNCHED, AttemptState.BOOTSTRAPPING,
             AttemptState.RUNNING, AttemptState.PREEMPTED]
    for i, state in enumerate(steps, start=1):
        with store.transaction() as tx:
            attempt = repo.transition_attempt(tx, attempt, state, reason="spot reclaimed" if i == 5 else None,
                                              now=T0 + timedelta(minutes=i))
    assert attempt.started_at == T0 + timedelta(minutes=4)
    assert attempt.ended_at == T0 + timedelta(minutes=5)
    assert attempt.reason == "spot reclaimed"
    with pytest.raises(InvalidTransitionError), store.transaction() as tx:
        repo.transition_attempt(tx, attempt, AttemptState.RUNNING)
    with store.transaction() as tx:
        again = repo.create_attempt(tx, job.id, "l000000000002", generation=1)
        with pytest.raises(InvalidTransitionError, match="from running to launched"):
            repo.transition_attempt(tx, repo.transition_attempt(tx, again, AttemptState.RUNNING),
                                    AttemptState.LAUNCHED)
        assert repo.get_attempt_by_launch_id(tx, "l000000000001").state == "preempted"
        assert repo.latest_generation(tx, job.id) == 1
        events = repo.list_events(tx, job_id=job.id, kinds=["attempt.state"])
    assert [e.data["to"] for e in events][:5] == [s.value for s in steps]


def test_instances_upsert_by_launch_id(store: Store) -> None:
    with store.transaction() as tx:
        job, _ = repo.upsert_job(tx, _spec("a"))
        rec = InstanceRecord(provider="aws", launch_id="l0000000000aa", owner="alice", job_id=job.id,
                             instance_type="p4d.24xlarge", region="us-east-1", zone="us-east-1a", market=Market.SPOT,
                             price_hr=9.8, gpu="A100-40G", gpu_count=8, state=InstanceState.PENDING)
        repo.record_instance(tx, rec, now=T0)
    with store.transaction() as tx:
        repo.record_instance(tx, InstanceRecord(provider="aws", launch_id="l0000000000aa", owner="alice",
                                                instance_id="i-123", state=InstanceState.RUNNING, public_ip="10.0.0.1",
                                                ssh_port=22, ssh_user="ubuntu", host_keys=("ssh-ed25519 AAA",)),
                             now=T0 + timedelta(minutes=1))
    with store.transaction() as tx:
        row = repo.get_instance_by_launch_id(tx, "l0000000000aa")
        assert row is not None
        assert (row.instance_id, row.state, row.price_hr, row.zone) == ("i-123", "running", 9.8, "us-east-1a")
        assert row.host_keys == ["ssh-ed25519 AAA"]
        assert repo.get_instance(tx, "aws", "i-123") is not None
        assert len(repo.list_instances(tx, job_id=job.id, live_only=True)) == 1
        with pytest.raises(TypeError, match="must be an InstanceState"):
            repo.mark_instance_gone(tx, "l0000000000aa", "preempted")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="'stopped' is not a gone state"):
            repo.mark_instance_gone(tx, "l0000000000aa", InstanceState.STOPPED)
        repo.mark_instance_gone(tx, "l0000000000aa", InstanceState.PREEMPTED, "Server.SpotInstanceTermination",
                                now=T0 + timedelta(hours=2))
    with store.transaction() as tx:
        assert repo.list_instances(tx, live_only=True) == []
        row = repo.get_instance_by_launch_id(tx, "l0000000000aa")
        assert row is not None and row.terminated_at == T0 + timedelta(hours=2)
        assert row.raw_state == "Server.SpotInstanceTermination"


def test_launch_id_is_unique(store: Store) -> None:
    with pytest.raises(IntegrityError), store.transaction() as tx:
        job, _ = repo.upsert_job(tx, _spec("a"))
        repo.create_attempt(tx, job.id, "l1")
        repo.create_attempt(tx, job.id, "l1")


def test_checkpoints_spend_and_events(store: Store) -> None:
    with store.transaction() as tx:
        job, _ = repo.upsert_job(tx, _spec("a"))
        attempt = repo.create_attempt(tx, job.id, "l2")
        repo.record_checkpoint(tx, job.id, "s3://b/ck/100", attempt_id=attempt.id, step=100, committed_at=T0)
        repo.record_checkpoint(tx, job.id, "s3://b/ck/200", attempt_id=attempt.id, step=200,
                               committed_at=T0 + timedelta(minutes=20))
        repo.record_spend(tx, job.id, T0, T0 + timedelta(hours=1), 2.5, attempt_id=attempt.id)
        repo.record_spend(tx, job.id, T0 + timedelta(hours=1), T0 + timedelta(hours=2), 2.25, attempt_id=attempt.id)
        with pytest.raises(ValueError):
            repo.record_spend(tx, job.id, T0, T0 - timedelta(seconds=1), 1.0)
        with pytest.raises(ValueError):
            repo.record_spend(tx, job.id, T0, T0, -1.0)
        repo.record_event(tx, EventKind.APPLY, "hello", data={"k": [1, 2]}, ts=T0)
    with store.transaction() as tx:
        latest = repo.latest_checkpoint(tx, job.id)
        assert latest is not None and (latest.uri, latest.step) == ("s3://b/ck/200", 200)
        assert repo.total_spend(tx, job.id) == pytest.approx(4.75)
        assert repo.last_spend_until(tx, attempt.id) == T0 + timedelta(hours=2)
        notes = repo.list_events(tx, kinds=[EventKind.APPLY])
        assert [(e.message, e.data, e.ts, e.job_id) for e in notes] == [("hello", {"k": [1, 2]}, T0, None)]
        first = repo.list_events(tx, limit=1)[0]
        assert all(e.id > first.id for e in repo.list_events(tx, after_id=first.id))


def test_naive_datetimes_are_refused(store: Store) -> None:
    with pytest.raises(Exception, match="naive"), store.transaction() as tx:
        repo.record_event(tx, EventKind.APPLY, ts=datetime(2026, 1, 1))
        tx.flush()


def test_timestamps_come_back_as_utc(store: Store) -> None:
    from datetime import timezone

    plus2 = datetime(2026, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    with store.transaction() as tx:
        repo.record_event(tx, EventKind.APPLY, ts=plus2)
    with store.transaction() as tx:
        event = repo.list_events(tx, kinds=[EventKind.APPLY])[0]
    assert event.ts == T0 and event.ts.utcoffset() == timedelta(0)
