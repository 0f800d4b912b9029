"""One cloud listing per provider per tick for the whole fleet (several daemons on one PostgreSQL store).

``shared_listing`` first reads the provider's row without a lock, and takes a listing already fresh for the caller
from it (the daemons coming after the lister's commit do not queue on the row). Otherwise it is the election and
the publication in one transaction: it locks the provider's row in
``listings`` (``SELECT ... FOR UPDATE``; the first daemon of a tick to get there is the lister, the others
wait on the lock), and either hands back the published listing, when it is fresh for the caller, or asks the
cloud (still holding the lock) and publishes what it said with the next version. Waiting behind the lister,
the others then find its listing fresh: one cloud call per provider per tick, whatever the number of daemons.

A daemon that did not publish the last listing, finding it stale and its lock free (the last lister not there
yet this tick), may step back a few short pauses for that lister first (``Deference``): a new lister costs the
fleet its adapter's first decode of the whole listing.

A daemon that waits longer than ``lock_wait`` (a lister stuck in a slow cloud call) lists by itself, without
publishing. A failed cloud call publishes nothing: the error reaches the caller (the sync counts that cloud
as unlisted this tick), and the next daemon to take the lock tries the cloud itself.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Text, cast, literal, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import OperationalError

from orchestrator.store.db import Store
from orchestrator.store.models import ListingRow
from providers.base import Instance, InstanceState, Market
from providers.fabric import Fabric


@dataclass(frozen=True, slots=True)
class Listing:
    """What a cloud listed; ``version`` is the published version (None: listed alone, not published);
    ``shared``: taken from another daemon's publication (no cloud call made)."""

    instances: list[Instance]
    version: int | None
    shared: bool


@dataclass(frozen=True, slots=True)
class Deference:
    """How a daemon that did not publish the last listing steps back for the daemon that did, when it finds the
    listing stale and nobody listing yet: ``pauses`` pauses of ``pause_s``, then it lists itself. A lister that
    changes pays its adapter's first decode of the whole listing (~0.2 s at 10k machines) and the fleet waits
    for it; a lister that is gone costs the others these pauses once, as one of them takes over."""

    pauses: int = 3
    pause_s: float = 0.01
    pause: Callable[[float], None] = time.sleep


@dataclass(frozen=True, slots=True)
class _Stale:
    """A published row that is not fresh for the caller, and the daemon that published it."""

    lister: str | None


@dataclass
class ListingCache:
    """A reader's last decoded listing per (provider, owner), by digest: a steady fleet's listing is the same
    each tick, and is then neither fetched nor decoded again."""

    decoded: dict[tuple[str, str], tuple[str, list[Instance]]] = field(default_factory=dict)


def shared_listing(store: Store, provider: str, owner: str, *, lister: str, now: datetime, max_age: timedelta,
                   min_version: int, ask: Callable[[], list[Instance]], cache: ListingCache | None = None,
                   lock_wait: timedelta = timedelta(seconds=30), defer: Deference | None = None) -> Listing:
    """The listing of ``provider``'s instances of ``owner`` (see the module's docstring).

    A published listing is fresh for the caller when its ``listed_at`` is within ``max_age`` of ``now``
    (either side: clocks differ a little between machines) and its version is at least ``min_version`` (the
    caller's own last publication: a daemon that launched since must not judge its machine by a listing
    older than the launch, so it passes a ``min_version`` above any published one, and lists itself).
    ``ask`` calls the cloud; its errors propagate and nothing is published.

    ``defer``: a caller that did not publish the row's listing, finding it stale and its lock free (its lister
    not there yet this tick), steps back a few short pauses for that lister before it lists itself
    (``Deference``)."""
    cache = cache if cache is not None else ListingCache()
    key = (provider, owner)
    pauses = defer.pauses if defer is not None else 0
    try:
        while True:
            # A listing already fresh for the caller is read without the lock: the daemons that come after the
            # lister's commit do not queue behind each other on the row.
            got = _read_fresh(store, key, cache, now, max_age, min_version)
            if isinstance(got, Listing):
                return got
            yielding = pauses > 0 and isinstance(got, _Stale) and got.lister not in (None, lister)
            done = _elect(store, key, got, lister, now, max_age, min_version, ask, cache, lock_wait, yielding)
            if done is not None:
                break
            pauses -= 1
            if defer is not None:       # always, when stepped back
                defer.pause(defer.pause_s)
        if isinstance(done, Listing):
            return done
        # Fresh once the lister committed: its machines are read and decoded after the lock is let go (those
        # waiting behind this daemon do not wait for its decoding: at 10k machines ~0.1-0.2 s each, in turn).
        got = _read_fresh(store, key, cache, now, max_age, min_version)
        return got if isinstance(got, Listing) else Listing(ask(), None, False)     # stale again already: alone
    except OperationalError:
        # The lock was not granted in time (or the store failed): the cloud is asked, nothing is published.
        return Listing(ask(), None, False)


def _elect(store: Store, key: tuple[str, str], got: _Stale | None, lister: str, now: datetime, max_age: timedelta,
           min_version: int, ask: Callable[[], list[Instance]], cache: ListingCache, lock_wait: timedelta,
           yielding: bool) -> Listing | bool | None:
    """The election under the row's lock: the listing (published by this caller, or by the lister it waited
    behind when this caller's cache holds its digest), True (fresh now: read it after the lock is let go), or
    None (``yielding`` and the lock was free: stepped back without listing)."""
    provider, owner = key
    with store.transaction() as tx:
        conn = tx.connection()
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{int(lock_wait.total_seconds() * 1000)}ms'")
        if got is None:     # no row yet (one that was read is there: rows are not deleted)
            conn.execute(pg_insert(_TABLE).values(provider=provider, owner=owner, version=0, listed_at=None,
                                                  lister=None, digest="", instances=[]).on_conflict_do_nothing())
        if yielding:
            # Free: the row's lister has not come this tick yet (it takes its listing first thing: fencing's
            # prelist); step back. Held: it is listing now, and the wait below is for its publication.
            free = conn.execute(select(_TABLE.c.version).where(_where(key))
                                .with_for_update(skip_locked=True)).first()
            if free is not None:
                return None
        # The lock is the election: the first daemon here this tick lists; the others wait, then read.
        locked = conn.execute(select(_TABLE.c.version, _TABLE.c.listed_at, _TABLE.c.digest).where(_where(key))
                              .with_for_update()).first()
        if locked is None:      # deleted since it was read (by hand): listed alone this tick
            return Listing(ask(), None, False)
        version, listed_at, digest = locked
        if _fresh((version, listed_at), now, max_age, min_version):
            held = cache.decoded.get(key)
            if held is not None and held[0] == digest:
                return Listing(list(held[1]), version, True)
        else:
            instances = ask()
            values: dict[str, Any] = {"version": version + 1, "listed_at": now, "lister": lister}
            held = cache.decoded.get(key)
            if held is not None and held[0] == digest and held[1] == instances:
                fresh = digest  # what is published: not encoded again (a steady tick's case, ~0.1 s at 10k)
            else:
                text = json.dumps([instance_to_json(i) for i in instances], sort_keys=True)
                fresh = hashlib.sha256(text.encode()).hexdigest()
                if fresh != digest:     # the same machines as published: only the version and the time move
                    # The text as encoded for the digest (the column's own serializer would encode it again).
                    values.update(digest=fresh, instances=cast(literal(text, Text), _TABLE.c.instances.type))
            conn.execute(update(_TABLE).where(_where(key)).values(**values))
            cache.decoded[key] = (fresh, list(instances))
            return Listing(instances, version + 1, False)
    return True


_TABLE: Any = ListingRow.__table__  # type: ignore[attr-defined]


def _where(key: tuple[str, str]) -> Any:
    return (_TABLE.c.provider == key[0]) & (_TABLE.c.owner == key[1])


def _read_fresh(store: Store, key: tuple[str, str], cache: ListingCache, now: datetime, max_age: timedelta,
                min_version: int) -> Listing | _Stale | None:
    """The published listing when it is fresh for the caller, read without a lock (``_Stale``: it is not; None:
    there is no row); its machines fetched and decoded only when the caller's cache does not hold that digest."""
    with store.transaction() as tx:
        conn = tx.connection()
        found = conn.execute(select(_TABLE.c.version, _TABLE.c.listed_at, _TABLE.c.digest, _TABLE.c.lister)
                             .where(_where(key))).first()
        if found is None:
            return None
        if not _fresh(found, now, max_age, min_version):
            return _Stale(found.lister)
        held = cache.decoded.get(key)
        if held is not None and held[0] == found.digest:
            return Listing(list(held[1]), found.version, True)
        row = conn.execute(select(_TABLE.c.version, _TABLE.c.listed_at, _TABLE.c.digest, _TABLE.c.instances)
                           .where(_where(key))).one()
    if not _fresh(row, now, max_age, min_version):      # the row as read with its machines
        return _Stale(found.lister)
    held = (row.digest, [instance_from_json(d) for d in row.instances])
    cache.decoded[key] = held
    return Listing(list(held[1]), row.version, True)


def _fresh(row: Any, now: datetime, max_age: timedelta, min_version: int) -> bool:
    """A published listing (``row``: its version and ``listed_at`` first) serves the caller (see above)."""
    version, listed_at = row[0], row[1]
    return listed_at is not None and version > 0 and version >= min_version and abs(now - listed_at) <= max_age


def instance_to_json(i: Instance) -> dict[str, Any]:
    return {"provider": i.provider, "instance_id": i.instance_id, "launch_id": i.launch_id, "owner": i.owner,
            "state": i.state.value, "instance_type": i.instance_type, "region": i.region, "zone": i.zone,
            "market": i.market.value, "job": i.job, "raw_state": i.raw_state, "raw_reason": i.raw_reason,
            "public_ip": i.public_ip, "private_ip": i.private_ip, "ssh_port": i.ssh_port, "ssh_user": i.ssh_user,
            "host_keys": list(i.host_keys), "created_at": i.created_at.isoformat() if i.created_at else None,
            "price_hr": i.price_hr, "extra": [list(kv) for kv in i.extra],
            "fabric": i.fabric.value if i.fabric else None}


def instance_from_json(d: dict[str, Any]) -> Instance:
    return Instance(
        provider=d["provider"], instance_id=d["instance_id"], launch_id=d["launch_id"], owner=d["owner"],
        state=InstanceState(d["state"]), instance_type=d["instance_type"], region=d["region"], zone=d["zone"],
        market=Market(d["market"]), job=d["job"], raw_state=d["raw_state"], raw_reason=d["raw_reason"],
        public_ip=d["public_ip"], private_ip=d["private_ip"], ssh_port=d["ssh_port"], ssh_user=d["ssh_user"],
        host_keys=tuple(d["host_keys"]),
        created_at=datetime.fromisoformat(d["created_at"]) if d["created_at"] else None, price_hr=d["price_hr"],
        extra=tuple((k, v) for k, v in d["extra"]), fabric=Fabric(d["fabric"]) if d["fabric"] else None)


def published(store: Store, provider: str, owner: str) -> tuple[int, list[Instance]] | None:
    """The published version and listing (tests, diagnostics); None: never published."""
    with store.transaction() as tx:
        row = tx.get(ListingRow, (provider, owner))
        if row is None or row.version == 0:
            return None
        return row.version, [instance_from_json(d) for d in row.instances]


__all__: Sequence[str] = ("Deference", "Listing", "ListingCache", "instance_from_json", "instance_to_json", "published",
                          "shared_listing")
