"""The sweep's network half: delete what orch created besides instances once nothing uses it.

Security groups (AWS), firewall rules (GCP), NSGs, public IPs and NICs (Azure), per-launch key pairs: each
provider lists its own (``Provider.list_network_resources``, found by orch's owner tag/label/name, with
``in_use``) and deletes one idempotently (``delete_network_resource``: missing is success, in use is
``ResourceInUseError``). What may go is ``providers.leftovers``'s rule: this owner's, unused, and both older
than the grace and unused for the grace (``EngineConfig.orphan_grace``, as for orphan instances). A
per-launch resource of a live attempt is never deleted (its launch may be between the resource and the
instance). Listing costs cloud calls, so each provider is listed at most every ``leftover_sweep_every``.
"""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import TickFacts
from orchestrator.engine.tick import TickLog
from providers.base import CloudResource, Provider
from providers.errors import ProviderError, ResourceInUseError, ResourceNotFoundError
from providers.leftovers import ResourceKey, leftovers, track_unused


class NetworkSweep:
    def __init__(self) -> None:
        self._unused: dict[ResourceKey, datetime] = {}
        self._listed_at: dict[str, datetime] = {}

    def run(self, deps: EngineDeps, facts: TickFacts, live_launch_ids: Set[str], log: TickLog) -> None:
        for name in facts.listed:               # only clouds that answered this tick
            last = self._listed_at.get(name)
            if last is not None and facts.now - last < deps.config.leftover_sweep_every:
                continue
            self._sweep(deps, name, deps.providers[name], facts.now, live_launch_ids, log)

    def _sweep(self, deps: EngineDeps, name: str, provider: Provider, now: datetime, live: Set[str],
               log: TickLog) -> None:
        owner = deps.config.owner
        try:
            found = [r for r in provider.list_network_resources(owner) if r.owner == owner]
        except ProviderError as exc:
            log.report.errors.append(f"{name}: network resources: {exc}")
            return
        self._listed_at[name] = now
        mine = {k: v for k, v in self._unused.items() if k[0] == name}
        unused = track_unused(found, mine, now)
        self._unused = {k: v for k, v in self._unused.items() if k[0] != name} | unused
        for res in leftovers(found, owner=owner, now=now, grace=deps.config.orphan_grace, unused_since=unused):
            if res.launch_id is not None and res.launch_id in live:
                continue
            if self._delete(deps, name, provider, res, now, log):
                self._unused.pop(res.key, None)

    @staticmethod
    def _delete(deps: EngineDeps, name: str, provider: Provider, res: CloudResource, now: datetime,
                log: TickLog) -> bool:
        try:
            provider.delete_network_resource(res)
        except ResourceNotFoundError:
            return True                          # already gone: nothing left to collect
        except ResourceInUseError:
            return False                         # taken again since the listing: the next one says so
        except ProviderError as exc:
            log.report.errors.append(f"{name}: delete {res.kind.value} {res.name}: {exc}")
            return False
        deps.store.event(EventKind.LEFTOVER_DELETED, f"{name} {res.kind.value} {res.name} (orch's, unused for "
                         f"{deps.config.orphan_grace}) deleted", now,
                         data={"provider": name, "kind": res.kind.value, "resource_id": res.resource_id})
        return True
