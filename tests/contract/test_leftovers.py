"""providers.leftovers: what a garbage collector may delete among the resources orch created."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from providers.base import CloudResource, ResourceKind
from providers.leftovers import is_leftover, leftovers, track_unused

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(minutes=10)


def res(rid: str = "us-east-1/sg-1", *, owner: str | None = "alice", in_use: bool = False,
        created: datetime | None = None) -> CloudResource:
    return CloudResource(provider="aws", kind=ResourceKind.SECURITY_GROUP, resource_id=rid, name="orch-alice",
                         owner=owner, in_use=in_use, created_at=created)


def test_old_unused_and_ours_is_a_leftover() -> None:
    assert is_leftover(res(created=NOW - timedelta(hours=1)), owner="alice", now=NOW, grace=GRACE)


def test_in_use_young_or_someone_elses_is_not() -> None:
    old = NOW - timedelta(hours=1)
    assert not is_leftover(res(created=old, in_use=True), owner="alice", now=NOW, grace=GRACE)
    assert not is_leftover(res(created=NOW - timedelta(minutes=9)), owner="alice", now=NOW, grace=GRACE)
    assert not is_leftover(res(created=old, owner="bob"), owner="alice", now=NOW, grace=GRACE)
    assert not is_leftover(res(created=old, owner=None), owner="alice", now=NOW, grace=GRACE)


def test_unknown_age_waits_for_the_collectors_own_clock() -> None:
    """AWS security groups report no creation time: the first sighting unused starts the clock."""
    r = res(created=None)
    assert not is_leftover(r, owner="alice", now=NOW, grace=GRACE)
    assert not is_leftover(r, owner="alice", now=NOW, grace=GRACE, unused_since=NOW - timedelta(minutes=5))
    assert is_leftover(r, owner="alice", now=NOW, grace=GRACE, unused_since=NOW - GRACE)


def test_an_old_resource_freed_just_now_waits_the_grace() -> None:
    r = res(created=NOW - timedelta(days=3))
    assert not is_leftover(r, owner="alice", now=NOW, grace=GRACE, unused_since=NOW - timedelta(minutes=1))


def test_track_unused_keeps_first_sighting_and_forgets_used_or_gone() -> None:
    a, b, c = res("r/a"), res("r/b", in_use=True), res("r/c")
    first = track_unused([a, b, c], {}, NOW)
    assert first == {a.key: NOW, c.key: NOW}
    later = NOW + timedelta(minutes=11)
    second = track_unused([a, res("r/c", in_use=True)], first, later)
    assert second == {a.key: NOW}
    assert leftovers([a, b, c], owner="alice", now=later, grace=GRACE, unused_since=second) == [a]
