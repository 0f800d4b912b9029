"""The daemon's providers on a shared store: fenced cloud calls, and one listing per provider per tick.

Wrapped around each provider the engine is given when several daemons share a PostgreSQL store
(``service.build_service``); the seams (monitor, bootstrapper) keep the bare providers.

* ``launch``, ``terminate`` and ``stop`` first check the fence (orchestrator/store/fleet.py):
  for a machine of a live attempt, that this daemon still holds the attempt's job at the generation it
  claimed; for anything else (a straggler of an ended attempt, an orphan), that this daemon is still a
  live member of the fleet. A daemon that was paused past its lease raises ``LeaseLostError`` here instead
  of calling the cloud, and its tick stops. (A pause between the check and the call cannot be fenced by a
  cloud API; launch ids make that call idempotent, and the sweep ends what an ended attempt left.)
* ``list_instances`` is asked once per tick: a second call in the same tick (the clean-up after an
  ambiguous launch error) gets the tick's listing, and whatever that launch left is ended by the next
  tick's sweep, which sees the ended attempt's machine in the listing.
* ... and asked of the cloud once per provider per tick by the whole fleet: the daemons elect a lister
  through the store, which publishes its listing for the others (orchestrator/store/listings.py). A
  published listing is used when it was taken within ``LISTING_MAX_AGE`` of this daemon's clock (less than
  a tick: the next tick lists afresh) and after this daemon's last launch on that provider. The second
  condition is what keeps a machine from looking lost: the sync fails a held attempt whose machine a
  listing lacks, and a listing taken before the launch lacks it. So after a launch a daemon lists by itself
  (and publishes), and accepts only listings published after that one.
* A daemon's first listing is shared like any other: a daemon starting beside others takes the fleet's fresh
  listing, or is elected to list it, so a fleet starting together asks each cloud once in its first tick too;
  one that finds no fresh listing lists by itself (the fallback of every tick). Its adapter then first decodes
  the whole listing the first time the election falls on it (~0.2-0.3 s at 10k machines, once per daemon).
* So the lister stays the same while it lives: the daemon whose own listing was published last tick takes
  its listing as its tick begins, before its claim, and is at the listing lock before the others, who come to
  it after theirs. The election is still the lock's (whoever is first lists); this only orders the arrivals,
  so that a daemon whose adapter has never decoded the listing is seldom the one the fleet waits for.
  A daemon whose claim was quicker than the lister's prelist, finding the listing stale and its lock free,
  steps back a few 10 ms pauses for it (``LISTER_DEFERENCE``) before it lists itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import OperationalError

from orchestrator.engine.states import AttemptState
from orchestrator.store import queries
from orchestrator.store.db import Store
from orchestrator.store.fleet_member import FleetMember
from orchestrator.store.listings import Deference, ListingCache, shared_listing
from providers.base import Instance, LaunchSpec, Provider
from providers.errors import ProviderError

#: How old a published listing may be and still serve this tick: under the daemon's tick (15 s by default), so
#: each tick sees a listing taken in it, by whichever daemon got there first.
LISTING_MAX_AGE = timedelta(seconds=7)

#: What a daemon that did not publish the last listing waits for the daemon that did (store.listings.Deference).
LISTER_DEFERENCE = Deference(pauses=5, pause_s=0.01)


class CloudGuard:
    """The fence for cloud calls, and the tick the listings belong to."""

    def __init__(self, store: Store, fleet: FleetMember) -> None:
        self.store = store
        self.fleet = fleet

    @property
    def tick(self) -> int:
        return self.fleet.ticks

    def launch(self, launch_id: str) -> None:
        with self.store.transaction() as tx:
            found = queries.launch_attempt(tx, launch_id)
            self._check(tx, found)

    def machine(self, provider: str, instance_id: str) -> None:
        with self.store.transaction() as tx:
            found = queries.instance_attempt(tx, provider, instance_id)
            self._check(tx, found)

    def _check(self, tx: Any, found: tuple[int, str] | None) -> None:
        if found is not None and AttemptState(found[1]).is_live:
            self.fleet.job(tx, found[0])
        else:
            self.fleet.daemon(tx)


class FencedProvider:
    """``inner`` with its cloud-changing calls fenced and its listing asked once per tick."""

    def __init__(self, inner: Provider, guard: CloudGuard, *, share_listings: bool = True) -> None:
        self._inner = inner
        self._guard = guard
        self._share = share_listings
        self._listed: dict[str, tuple[int, list[Instance]]] = {}
        #: How many times the cloud was really asked for its list (tests count them).
        self.listings = 0
        #: Per owner: the version of this daemon's last published listing; a launch since raises it past any
        #: published version (this daemon then lists itself: see the module's docstring).
        self._min_version: dict[str, int] = {}
        self._decoded = ListingCache()
        #: Owners whose listing this daemon published last (taken again first thing next tick: ``prelist``).
        self._lister_of: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def launch(self, spec: LaunchSpec) -> Instance:
        self._guard.launch(spec.launch_id)
        # Before the call, whatever it does: no published listing taken before it may judge its machine.
        self._min_version[spec.owner] = _NEWER_THAN_ANY
        return self._inner.launch(spec)

    def terminate(self, instance_id: str) -> None:
        self._guard.machine(self._inner.name, instance_id)
        self._inner.terminate(instance_id)

    def stop(self, instance_id: str) -> None:
        self._guard.machine(self._inner.name, instance_id)
        self._inner.stop(instance_id)

    def list_instances(self, owner: str) -> list[Instance]:
        hit = self._listed.get(owner)
        if hit is not None and hit[0] == self._guard.tick:
            return list(hit[1])
        holding = self._guard.fleet.holding
        # Alone in the fleet, nobody would read a publication: the cloud is asked directly (a first tick at 10k
        # saves encoding and storing ~3 MB).
        if self._share and holding is not None and holding.live_daemons > 1:
            got = shared_listing(self._guard.store, self._inner.name, owner, lister=self._guard.fleet.owner,
                                 now=self._guard.fleet.clock(), max_age=LISTING_MAX_AGE,
                                 min_version=self._min_version.get(owner, 0), ask=lambda: self._ask(owner),
                                 cache=self._decoded,
                                 defer=None if owner in self._lister_of else LISTER_DEFERENCE)
            listed = got.instances
            if not got.shared:
                # Listed by this daemon (after its launches): published listings from this one on serve it.
                self._min_version[owner] = got.version if got.version is not None else _NEWER_THAN_ANY
            if got.shared or got.version is None:
                self._lister_of.discard(owner)
            else:
                self._lister_of.add(owner)
        else:
            listed = self._ask(owner)
        self._listed[owner] = (self._guard.tick, listed)
        return list(listed)

    def prelist(self, now: datetime) -> None:
        """As a tick begins: the listings this daemon published last tick, taken again now (see the module's
        docstring); the tick's sync then gets them from ``list_instances``' per-tick memo. A failure here is
        left for the sync's own call, which asks again and reports it."""
        for owner in sorted(self._lister_of):
            try:
                self.list_instances(owner)
            except (ProviderError, OperationalError):
                self._lister_of.discard(owner)

    def _ask(self, owner: str) -> list[Instance]:
        listed = self._inner.list_instances(owner)     # a failure is not cached: the next call asks again
        self.listings += 1
        return listed


#: A version no publication reaches: the daemon lists by itself until it has published again.
_NEWER_THAN_ANY = 2**62


def fenced(providers: Mapping[str, Provider], store: Store, fleet: FleetMember, *,
           share_listings: bool = True) -> dict[str, Provider]:
    """The daemon's providers on a shared store: fenced, and (``share_listings``, PostgreSQL) listing once per
    provider per tick for the whole fleet."""
    guard = CloudGuard(store, fleet)
    share = share_listings and store.dialect == "postgresql"
    out = {name: FencedProvider(p, guard, share_listings=share) for name, p in providers.items()}
    if share:
        fleet.on_begin.extend(p.prelist for p in out.values())
    return out  # type: ignore[return-value]
