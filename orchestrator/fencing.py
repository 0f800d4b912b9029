"""The daemon's providers on a shared store: fenced cloud calls, and one listing per provider per tick.

Wrapped around each provider the engine is given when several daemons share a PostgreSQL store
(``service.build_service``); the seams (monitor, bootstrapper) keep the bare providers.

* ``launch``, ``terminate`` and ``stop`` first check the fence (orchestrator/store/fleet.py):
  for a machine of a live attempt, that this daemon still holds the attempt's job at the generation it
  claimed; for anything else (a straggler of an ended attempt, an orphan), that this daemon is still a
  live member of the fleet. A daemon that was paused past its lease raises ``LeaseLostError`` here instead
  of calling the cloud, and its tick stops. (A pause between the check and the call cannot be fenced by a
  cloud API; launch ids make that call idempotent, and the sweep ends what an ended attempt left.)
* ``list_instances`` is asked of the cloud once per tick: a second call in the same tick (the clean-up
  after an ambiguous launch error) gets the tick's listing, and whatever that launch left is ended by the
  next tick's sweep, which sees the ended attempt's machine in the listing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.store import queries
from orchestrator.store.db import Store
from orchestrator.store.fleet import FleetMember
from orchestrator.store.models import AttemptState
from providers.base import Instance, LaunchSpec, Provider


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

    def __init__(self, inner: Provider, guard: CloudGuard) -> None:
        self._inner = inner
        self._guard = guard
        self._listed: dict[str, tuple[int, list[Instance]]] = {}
        #: How many times the cloud was really asked for its list (tests count them).
        self.listings = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def launch(self, spec: LaunchSpec) -> Instance:
        self._guard.launch(spec.launch_id)
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
        listed = self._inner.list_instances(owner)     # a failure is not cached: the next call asks again
        self.listings += 1
        self._listed[owner] = (self._guard.tick, listed)
        return list(listed)


def fenced(providers: Mapping[str, Provider], store: Store, fleet: FleetMember) -> dict[str, Provider]:
    guard = CloudGuard(store, fleet)
    return {name: FencedProvider(p, guard) for name, p in providers.items()}  # type: ignore[misc]
