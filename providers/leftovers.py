"""Which of orch's non-instance resources a garbage collector may delete: pure functions, no cloud calls.

A leftover is a ``CloudResource`` orch created for this owner that nothing uses and that is older than a
grace period. The grace period covers the window in which a launch has created a resource but not yet the
instance that will use it (an AWS security group before RunInstances, an Azure public IP before its NIC).

Age is measured twice where possible: from the cloud's ``created_at``, and from when the collector first
saw the resource unused (``unused_since``, kept by the caller across ticks, see ``track_unused``). Both
that are known must exceed the grace; with neither known (an AWS security group seen for the first time)
the answer is "not yet".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from providers.base import CloudResource, ResourceKind

ResourceKey = tuple[str, ResourceKind, str]


def is_leftover(resource: CloudResource, *, owner: str, now: datetime, grace: timedelta,
                unused_since: datetime | None = None) -> bool:
    """True when ``resource`` is orch's for ``owner``, not in use, and old enough to delete."""
    if resource.owner != owner or resource.in_use:
        return False
    ages = [now - t for t in (resource.created_at, unused_since) if t is not None]
    return bool(ages) and all(age >= grace for age in ages)


def track_unused(resources: Iterable[CloudResource], previous: Mapping[ResourceKey, datetime],
                 now: datetime) -> dict[ResourceKey, datetime]:
    """The collector's next ``unused since`` map: the earliest sighting of each resource still unused.

    Resources in use, or no longer listed, drop out (an in-use resource's clock starts again later).
    """
    return {r.key: previous.get(r.key, now) for r in resources if not r.in_use}


def leftovers(resources: Iterable[CloudResource], *, owner: str, now: datetime, grace: timedelta,
              unused_since: Mapping[ResourceKey, datetime]) -> list[CloudResource]:
    """The resources a collector may delete now, in listing order."""
    return [r for r in resources
            if is_leftover(r, owner=owner, now=now, grace=grace, unused_since=unused_since.get(r.key))]


__all__ = ["ResourceKey", "is_leftover", "leftovers", "track_unused"]
