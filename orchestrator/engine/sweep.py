"""The sweep (garbage collection): end machines no live attempt owns.

* Stragglers: machines of ended attempts the cloud still lists. Ended once ``drain_until`` (a notice's
  drain) has passed; a machine stopped on purpose when idle (``EndCause.IDLE_STOPPED``) is kept while its job
  is wanted (not torn down: ``orch down``, pruned), then ended too. A straggler whose terminate the cloud
  answered is asked again only while still listed billing, ``STRAGGLER_ASK_AGAIN`` after the last ask.
* Orphans: machines tagged as this owner's with a launch id the store does not know (orch died between
  the cloud's yes and its own write, or another daemon's crash), after the grace period. Only this
  store's: a launch id carrying another store's identity belongs to another store on the same cloud
  account and owner name, and is never touched (a launch id carrying none was made before stores had
  identities, and is swept as before).
* Leftover network resources (security groups, firewall rules, NSGs, public IPs, NICs, key pairs) orch
  created and nothing uses any more, after the same grace (``orchestrator.engine.leftovers``).

Decided from the attempts' typed causes and the clouds' listings, never from reason text.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.ending import terminate
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import TickFacts, same_listings
from orchestrator.engine.leftovers import NetworkSweep
from orchestrator.engine.ports import AttemptRecord
from orchestrator.engine.states import EndCause
from orchestrator.engine.tick import TickLog
from providers.base import Instance, InstanceState

#: How long after a straggler's accepted terminate the sweep asks again while the cloud still lists it billing
#: (a terminate the cloud answered and dropped): idempotent, so asking again is safe; not every tick.
STRAGGLER_ASK_AGAIN = timedelta(minutes=10)


class SweepStep:
    def __init__(self) -> None:
        self._orphans_seen: dict[tuple[str, str], datetime] = {}
        #: Stragglers asked to end, and when: a cloud may keep listing a reclaimed machine for a long while (AWS,
        #: ~1 h), so one is asked again only while listed billing, ``STRAGGLER_ASK_AGAIN`` after the last ask.
        self._asked_to_end: dict[tuple[str, str], datetime] = {}
        self._network = NetworkSweep()
        #: The last tick's listings, live launch ids and the machines they left no attempt for: a steady
        #: fleet's every daemon scans the whole listing here, so an unchanged one is not scanned again.
        self._scanned: tuple[object, dict[str, tuple[Instance, ...]], set[str], list[tuple[str, Instance]]] | None
        self._scanned = None

    def run(self, deps: EngineDeps, facts: TickFacts, log: TickLog) -> list[tuple[Instance, AttemptRecord]]:
        """End stragglers and orphans; returns the stragglers the cloud lists billing, with their ended
        attempts (still billed until they are gone: the spend step charges them)."""
        live = deps.store.all_live_launch_ids()
        mine = (deps.config.owner, deps.config.store_id)
        if (self._scanned is not None and self._scanned[0] == mine and self._scanned[2] == live
                and same_listings(self._scanned[1], facts.listed)):
            candidates = self._scanned[3]
        else:
            # PREEMPTED counts: a Vast instance outbid to "stopped" still bills its disk until destroyed.
            candidates = [(name, inst) for name, instances in facts.listed.items() for inst in instances
                          if inst.state is not InstanceState.TERMINATED and inst.owner == deps.config.owner
                          and inst.launch_id not in live and _this_stores(inst, deps.config.store_id)]
            self._scanned = (mine, dict(facts.listed), live, candidates)
        wanted = [i.launch_id for _, i in candidates if i.launch_id]
        ended = deps.store.attempts_by_launch_ids(wanted) if wanted else {}
        # A machine stopped when idle keeps its disk for its job while the job is wanted (asked only when such
        # a machine is listed: one read a tick).
        kept_for = sorted({a.job_id for _, i in candidates if i.state is InstanceState.STOPPED
                           and (a := ended.get(i.launch_id or "")) is not None
                           and a.end_cause is EndCause.IDLE_STOPPED})
        wanted_jobs = deps.store.wanted_jobs(kept_for) if kept_for else set()
        seen_now: set[tuple[str, str]] = set()
        billing: list[tuple[Instance, AttemptRecord]] = []
        for name, inst in candidates:
            attempt = ended.get(inst.launch_id or "")
            if attempt is not None:
                if attempt.id in log.ended:
                    # Ended by this tick's steps: the listing predates that end (a machine an idle stop just
                    # stopped still reads as running). The next tick's listing says what is left.
                    continue
                if inst.bills:
                    billing.append((inst, attempt))
                self._straggler(deps, name, inst, attempt, facts.now, log, keep=attempt.job_id in wanted_jobs)
                continue
            seen_now.add((name, inst.instance_id))
            self._orphan(deps, name, inst, facts.now, log)
        self._orphans_seen = {k: v for k, v in self._orphans_seen.items() if k in seen_now}
        listed = {(name, inst.instance_id) for name, inst in candidates}
        self._asked_to_end = {k: v for k, v in self._asked_to_end.items() if k in listed}
        self._network.run(deps, facts, live, log)
        return billing

    def _straggler(self, deps: EngineDeps, name: str, inst: Instance, attempt: AttemptRecord, now: datetime,
                   log: TickLog, *, keep: bool) -> None:
        """``keep``: the machine was stopped when idle and its job is still wanted (it keeps its disk)."""
        if inst.state is InstanceState.STOPPED and attempt.end_cause is EndCause.IDLE_STOPPED and keep:
            return      # stopped on purpose, keeping its disk for its job
        if attempt.drain_until is not None and now < attempt.drain_until:
            return      # still draining its notice checkpoint
        key = (name, inst.instance_id)
        asked = self._asked_to_end.get(key)
        if asked is not None and (not inst.bills or now - asked < STRAGGLER_ASK_AGAIN):
            return
        if not terminate(deps.providers[name], inst.instance_id, log):
            return      # refused (a fault, a throttle): asked again next tick, not remembered as asked
        self._asked_to_end[key] = now
        log.report.terminated += 1

    def _orphan(self, deps: EngineDeps, name: str, inst: Instance, now: datetime, log: TickLog) -> None:
        first = self._orphans_seen.setdefault((name, inst.instance_id), now)
        if now - first < deps.config.orphan_grace:
            return
        terminate(deps.providers[name], inst.instance_id, log)
        deps.store.event(EventKind.ORPHAN_TERMINATED, f"{name} {inst.instance_id} (launch {inst.launch_id}) is "
                         "tagged as orch's but unknown to the store", now)
        log.report.orphans_terminated += 1
        if deps.metrics:
            deps.metrics.orphans_terminated.labels(name).inc()


def _this_stores(inst: Instance, store_id: str) -> bool:
    """Whether ``inst`` may be this store's: its launch id carries this store's id, or none at all."""
    from providers.base import launch_store

    found = launch_store(inst.launch_id)
    return not store_id or found is None or found == store_id
