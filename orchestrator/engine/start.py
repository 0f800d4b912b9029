"""The start step: start the job on machines that are up (LAUNCHED -> BOOTSTRAPPING -> RUNNING).

A machine the cloud lists as running gets its job started through the Bootstrapper (over SSH; the default
leaves it to the startup script). The attempt is BOOTSTRAPPING from the first try until the bootstrapper
says the job runs (an unreachable machine stays BOOTSTRAPPING and is tried again next tick). Two things
hold a start back: a gang's ranks > 0 wait for node 0 (they join its rendezvous), and a replacement waits
while a noticed machine of the same job still uploads its notice checkpoint (so it restores that one);
meanwhile its files are staged on its machine (``stage``, where the bootstrapper has one), so the start
after the commit only starts its agent.
The job is RUNNING once every node of its gang is.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.events import EventKind
from orchestrator.engine.facts import Observed, TickFacts
from orchestrator.engine.ports import AttemptRecord
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.engine.tick import TickLog
from providers.base import Instance

log_ = logging.getLogger("orch.engine.start")

GangKey = tuple[int, int]      # (job id, generation)
_STARTING = (AttemptState.LAUNCHED, AttemptState.BOOTSTRAPPING)


def run(deps: EngineDeps, facts: TickFacts, log: TickLog) -> None:
    starting = [seen for seen in facts.observed if seen.attempt.state in _STARTING]
    if not starting:
        return          # a steady fleet: nothing to start, no need to map its gangs
    masters: dict[GangKey, Instance] = {}
    running: dict[GangKey, set[int]] = {}
    for seen in facts.observed:
        a = seen.attempt
        if a.state is AttemptState.RUNNING:
            running.setdefault((a.job_id, a.generation), set()).add(a.node_rank)
            if a.node_rank == 0 and seen.instance is not None:
                masters[(a.job_id, a.generation)] = seen.instance
    for seen in starting:
        a = seen.attempt
        if not seen.machine_running or not seen.job.desired_active or a.id in log.ended:
            continue
        if _waits_for_drain(facts, a):
            _stage(deps, seen, log)
            continue
        key = (a.job_id, a.generation)
        if a.node_rank > 0:
            master = masters.get(key)
            if master is None:
                continue        # node 0 starts first: it hosts the rendezvous the other nodes join
            a = replace(a, master_addr=master.private_ip or master.public_ip or "127.0.0.1",
                        master_key=f"{master.provider}/{master.instance_id}")
        if not _start(deps, seen, a, facts.now, log):
            continue
        assert seen.instance is not None
        if a.node_rank == 0:
            masters[key] = seen.instance
        running.setdefault(key, set()).add(a.node_rank)
        _announce(deps, seen, len(running[key]), facts)


def _waits_for_drain(facts: TickFacts, attempt: AttemptRecord) -> bool:
    return any(d.attempt.job_id == attempt.job_id and d.attempt.generation < attempt.generation
               and d.holds_successor for d in facts.draining)


def _stage(deps: EngineDeps, seen: Observed, log: TickLog) -> None:
    """While the replacement waits for the noticed machine's commit, put its files on its machine (a
    bootstrapper with a ``stage``: over SSH), so the start after the commit only starts its agent."""
    stage = getattr(deps.hooks.bootstrapper, "stage", None)
    if stage is None:
        return
    assert seen.instance is not None
    try:
        stage(seen.job, seen.attempt, seen.instance)
    except Exception as exc:  # the start will upload itself; a staging bug must not stop the tick
        log_.exception("stage failed")
        log.report.errors.append(f"stage {seen.attempt.launch_id}: {exc}")


def _start(deps: EngineDeps, seen: Observed, attempt: AttemptRecord, now: datetime, log: TickLog) -> bool:
    assert seen.instance is not None
    if attempt.state is AttemptState.LAUNCHED:
        deps.store.set_attempt_state(attempt.id, AttemptState.BOOTSTRAPPING, now)
    try:
        started = deps.hooks.bootstrapper.start(seen.job, attempt, seen.instance)
    except Exception as exc:  # a bootstrap bug must not stop the tick for other jobs
        log_.exception("bootstrap failed")
        log.report.errors.append(f"bootstrap {attempt.launch_id}: {exc}")
        return False
    if started:
        deps.store.set_attempt_state(attempt.id, AttemptState.RUNNING, now, instance=seen.instance)
    return started


def _announce(deps: EngineDeps, seen: Observed, up: int, facts: TickFacts) -> None:
    job, inst = seen.job, seen.instance
    assert inst is not None
    nodes = job.spec.plan.nodes
    if up >= nodes:
        deps.store.set_job_status(job.id, JobStatus.RUNNING, facts.now)
        where = f"{inst.provider} {inst.instance_id}" if nodes == 1 else f"{nodes} nodes on {inst.provider}"
        deps.store.event(EventKind.STARTED, f"job running on {where}", facts.now, job_id=job.id)
    else:
        deps.store.event(EventKind.NODE_STARTED, f"node {seen.attempt.node_rank} of {nodes} running on "
                         f"{inst.provider} {inst.instance_id}", facts.now, job_id=job.id)
