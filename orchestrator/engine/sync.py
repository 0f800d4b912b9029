"""The passive phase: list the clouds, read the nodes, mirror both into the store, return the facts.

It decides nothing and starts nothing. What it writes is what the clouds and the nodes already say:

* instance rows (``observe_instances``);
* an attempt the cloud has created under its launch id is LAUNCHED (adopted: orch may have died between
  the cloud's yes and its own write);
* an attempt being terminated whose machine is gone is TERMINATED;
* an attempt whose machine the cloud took is PREEMPTED (spot: ``EndCause.PREEMPTED``) or FAILED (an
  on-demand machine vanished: ``EndCause.LOST``), with a ``preempted`` event;
* the checkpoints the nodes' agents report as committed.

A cloud whose listing fails is NOT an empty cloud: its attempts are left out of the facts this tick. So are
those of a provider no longer configured, with an error in every tick's report (their machines may bill). An agent
whose monitor raises is an unread report (an error in the tick's report), never the end of the tick.
What to do about any of it is for the active steps (orchestrator/engine/reconciler.py lists them).

A steady tick costs what changed: with a ``SyncMemo`` (the reconciler's), an attempt whose record (the store's
kept read hands out the same object until something wrote it), machine (equal to the last listing's) and
job are those of the last tick, and whose agent has nothing to report, is not mirrored again: its last
``Observed`` is handed on as it was, and ``TickFacts.changed`` leaves it out, so the steps after skip it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import HOLDING_STATES, Draining, Observed, TickFacts, same_listings
from orchestrator.engine.hooks import AgentReport
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.engine.tick import TickReport
from orchestrator.words import plural
from providers.base import Instance, InstanceState, Market
from providers.errors import ProviderError


@dataclass
class SyncMemo:
    """The last tick's observations by attempt id (see the module's docstring), and the attempts whose machine
    the monitor does not listen to (it reads nothing for them: asked again only when they change)."""

    seen: dict[int, Observed] = field(default_factory=dict)
    deaf: set[int] = field(default_factory=set)
    #: The last listings (the very Instance objects) and their index by launch id: a steady listing (a
    #: same-bytes cache's, or the fleet's shared one) is not indexed again (~5 ms per 10k machines, paid by
    #: every daemon of a fleet for the whole listing).
    listed: dict[str, list[Instance]] = field(default_factory=dict)
    by_launch: dict[str, Instance] = field(default_factory=dict)


def sync(deps: EngineDeps, now: datetime, report: TickReport, memo: SyncMemo | None = None) -> TickFacts:
    deps.store.begin_tick(now)
    listed, unlistable = _list_clouds(deps, report)
    if memo is not None and same_listings(memo.listed, listed):
        by_launch = memo.by_launch
    else:
        by_launch = _by_launch_id(listed)
        if memo is not None:
            memo.listed, memo.by_launch = listed, by_launch
    jobs = {j.id: j for j in deps.store.active_jobs()}
    last, deaf = (memo.seen, memo.deaf) if memo is not None else ({}, set())
    kept: dict[int, Observed] = {}
    observed: list[Observed] = []
    changed: list[int] = []
    held: set[int] = set()
    unmanaged: Counter[str] = Counter()
    for attempt in deps.store.live_attempts():
        if attempt.offer.provider in unlistable or attempt.offer.provider not in deps.providers:
            held.add(attempt.job_id)
            if attempt.offer.provider not in deps.providers:
                unmanaged[attempt.offer.provider] += 1
            continue
        job = jobs.get(attempt.job_id) or deps.store.job(attempt.job_id)
        inst = by_launch.get(attempt.launch_id)
        seen = last.get(attempt.id)
        if seen is not None and seen.job is not job and _same_but_spend(seen.job, job):
            seen = replace(seen, job=job)       # only its spend total moved (the spend step's doing)
        if (seen is None or seen.attempt is not attempt or seen.job is not job or seen.agent is not None
                or not (seen.instance is inst or seen.instance == inst)):
            seen = _observe(deps, job, attempt, inst, now, report)
            changed.append(attempt.id)
            if seen.instance is not None and not deps.hooks.monitor.listens(job, seen.attempt, seen.instance):
                deaf.add(attempt.id)
            else:
                deaf.discard(attempt.id)
        elif attempt.id not in deaf and (agent := _agent(deps, job, attempt, inst, now, report)) is not None:
            # Unchanged but for its agent's report: mirroring it again would write nothing (it wrote nothing
            # last tick on the same record and machine).
            seen = Observed(job=job, attempt=attempt, before=attempt.state, instance=inst, agent=agent)
            changed.append(attempt.id)
        observed.append(seen)
        if seen.attempt is attempt:
            kept[attempt.id] = seen      # an attempt the sync moved on is read anew next tick: not kept
        if seen.attempt.state.is_live:
            held.add(attempt.job_id)
    for name, n in sorted(unmanaged.items()):
        # Nothing here can list, stop or end these machines, and they may bill: said every tick, never quiet.
        report.errors.append(f"{name}: not configured, yet {plural(n, 'live attempt')} of orch's on it: orch can "
                             "neither watch nor end their machines, which may bill (configure it again, or end "
                             "them in its console)")
    if memo is not None:
        memo.seen = kept
        memo.deaf.intersection_update(kept)
    draining = tuple(_draining(deps, jobs, by_launch, now, report))
    for name, instances in listed.items():
        deps.store.observe_instances(name, instances, now)
    return TickFacts(now=now, listed={k: tuple(v) for k, v in listed.items()}, unlistable=frozenset(unlistable),
                     jobs=jobs, observed=tuple(observed), draining=draining, held_jobs=frozenset(held),
                     changed=frozenset(changed) if memo is not None else None)


#: How ``_same_but_spend`` compares each field of a ``JobRecord`` but ``spent_usd``: the parsed manifest and spec
#: by identity (the store hands out one object per manifest hash; a deep compare would cost what this saves),
#: the rest by value. tests/test_steady_tick.py holds these to ``JobRecord``'s fields, so a field added
#: there cannot be left out here.
SAME_OBJECT_FIELDS = ("manifest", "spec", "status")
EQUAL_VALUE_FIELDS = ("id", "name", "desired_active", "relaunch_count", "created_at")


def _same_but_spend(a: JobRecord, b: JobRecord) -> bool:
    """The same job record but for its spend total."""
    return (all(getattr(a, f) is getattr(b, f) for f in SAME_OBJECT_FIELDS)
            and all(getattr(a, f) == getattr(b, f) for f in EQUAL_VALUE_FIELDS))


def _list_clouds(deps: EngineDeps, report: TickReport) -> tuple[dict[str, list[Instance]], set[str]]:
    listed: dict[str, list[Instance]] = {}
    failed: set[str] = set()
    for name, provider in deps.providers.items():
        try:
            listed[name] = provider.list_instances(deps.config.owner)
        except ProviderError as exc:
            failed.add(name)
            report.errors.append(f"{name}: list failed: {exc}")
    return listed, failed


def _by_launch_id(listed: Mapping[str, Sequence[Instance]]) -> dict[str, Instance]:
    by_launch: dict[str, Instance] = {}
    for instances in listed.values():
        for inst in instances:
            if inst.launch_id:
                prev = by_launch.get(inst.launch_id)
                # A terminated row may linger beside a live one with the same launch id: prefer live.
                if prev is None or (prev.state.is_gone and not inst.state.is_gone):
                    by_launch[inst.launch_id] = inst
    return by_launch


def _observe(deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, inst: Instance | None, now: datetime,
             report: TickReport) -> Observed:
    after = _mirror(deps, attempt, inst, now, report)
    return Observed(job=job, attempt=after, before=attempt.state, instance=inst,
                    agent=_agent(deps, job, after, inst, now, report))


def _agent(deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, inst: Instance | None,
           now: datetime, report: TickReport) -> AgentReport | None:
    """The agent's report, read where one may run the job (a running attempt and machine of an active job)."""
    if (attempt.state is AttemptState.RUNNING and inst is not None and inst.state is InstanceState.RUNNING
            and job.desired_active):
        return _read(deps, job, attempt, inst, now, report)
    return None


def _mirror(deps: EngineDeps, attempt: AttemptRecord, inst: Instance | None, now: datetime,
            report: TickReport) -> AttemptRecord:
    """Write what the cloud says about one attempt; return the attempt as it now stands."""
    store = deps.store
    gone = inst is None or inst.state.is_gone
    if attempt.state is AttemptState.TERMINATE_REQUESTED:
        if not gone:
            return attempt
        store.set_attempt_state(attempt.id, AttemptState.TERMINATED, now, reason="confirmed gone")
        report.terminated += 1
        return replace(attempt, state=AttemptState.TERMINATED, ended_at=now, reason="confirmed gone")
    if attempt.state in (AttemptState.PLANNED, AttemptState.LAUNCH_REQUESTED):
        if inst is None or gone:
            return attempt      # the cloud never saw it: the launch step asks again with the same launch id
        store.set_attempt_state(attempt.id, AttemptState.LAUNCHED, now, instance=inst)
        store.event(EventKind.ADOPTED, f"adopted {inst.provider} {inst.instance_id} for launch {attempt.launch_id}",
                    now, job_id=attempt.job_id)
        report.adopted += 1
        return replace(attempt, state=AttemptState.LAUNCHED, instance_id=inst.instance_id)
    if attempt.state not in HOLDING_STATES:
        return attempt
    if inst is None or inst.state is InstanceState.TERMINATED:
        if attempt.offer.market is Market.SPOT:
            why = "instance gone" if inst is None else (inst.raw_reason or inst.raw_state or "terminated")
            return _reclaimed(deps, attempt, why, now, report)
        store.set_attempt_state(attempt.id, AttemptState.FAILED, now, reason="instance disappeared",
                                cause=EndCause.LOST)
        return replace(attempt, state=AttemptState.FAILED, ended_at=now, reason="instance disappeared",
                       end_cause=EndCause.LOST)
    if inst.state is InstanceState.PREEMPTED:
        return _reclaimed(deps, attempt, inst.raw_reason or inst.raw_state, now, report)
    return attempt


def _reclaimed(deps: EngineDeps, attempt: AttemptRecord, why: str, now: datetime,
               report: TickReport) -> AttemptRecord:
    deps.store.set_attempt_state(attempt.id, AttemptState.PREEMPTED, now, reason=why, cause=EndCause.PREEMPTED)
    record_preemption(deps, attempt, why, now, report)
    return replace(attempt, state=AttemptState.PREEMPTED, ended_at=now, reason=why, end_cause=EndCause.PREEMPTED)


def record_preemption(deps: EngineDeps, attempt: AttemptRecord, why: str, now: datetime,
                      report: TickReport) -> None:
    """The event and counters of one preemption (a reclaimed machine here, a notice in the recovery step)."""
    deps.store.event(EventKind.PREEMPTED, f"{attempt.offer.provider} {attempt.instance_id} preempted ({why})", now,
                     job_id=attempt.job_id, data={"zone": attempt.offer.zone, "region": attempt.offer.region})
    report.preempted += 1
    if deps.metrics:
        deps.metrics.preemptions.labels(attempt.offer.provider).inc()


def _read(deps: EngineDeps, job: JobRecord, attempt: AttemptRecord, inst: Instance, now: datetime,
          report: TickReport) -> AgentReport | None:
    """The agent's report (its committed checkpoints recorded), or None. A monitor that raises is an unread
    report (as an unreachable channel is) and an error in the tick's report: one machine's channel must not
    stop the tick, whose later steps (budgets, teardown, sweep) end machines for every job."""
    try:
        agent = deps.hooks.monitor.read(job, attempt, inst)
    except Exception as exc:
        report.errors.append(f"read the agent of {attempt.offer.provider} {inst.instance_id}: {exc}")
        return None
    if agent is not None:
        for uri, step in agent.checkpoints:
            deps.store.record_checkpoint(job.id, attempt.id, uri, step, now)
    return agent


def _draining(deps: EngineDeps, jobs: Mapping[int, JobRecord], by_launch: Mapping[str, Instance],
              now: datetime, report: TickReport) -> list[Draining]:
    """Machines still draining after a notice, with what their agents say (their checkpoints are recorded)."""
    out = []
    for attempt in deps.store.draining_attempts(now):
        job = jobs.get(attempt.job_id)
        inst = by_launch.get(attempt.launch_id)
        agent = None
        if job is not None and inst is not None and not inst.state.is_gone:
            agent = _read(deps, job, attempt, inst, now, report)
        out.append(Draining(attempt=attempt, instance=inst, agent=agent))
    return out
