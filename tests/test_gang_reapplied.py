"""A gang's job re-applied with fewer nodes while the gang runs (``resources.nodes: 2`` -> ``1``): the running gang
is still two machines, and ending one node must end the other. Before, ``gang_end.others_live`` read the node
count from the job's current manifest (1: "no gang") and ended nothing: after node 0 was preempted, node 1 ran on,
billing, and held the job, so the recovery's relaunch was never carried out (the job stayed RECOVERING for good).
Now the gang is the attempts that share the ended node's generation, whatever the manifest says today."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from orchestrator.engine.jobspec import JobSpec
from orchestrator.engine.ports import JobRecord
from orchestrator.store import repo
from tests.fakes.memory_store import MemoryStore
from tests.support.manifests import manifest
from tests.test_engine import live, settle, spec, world  # noqa: F401
from tests.test_engine_multinode import gang


def _reapply(store, job: JobRecord, new: JobSpec, now: datetime) -> None:  # type: ignore[no-untyped-def]
    """``orch apply`` of the job's manifest changed to ``new`` (a new manifest hash)."""
    if isinstance(store, MemoryStore):
        store.jobs[job.id] = replace(store.jobs[job.id], spec=new)
        return
    m = manifest(new.name, gpus=list(new.plan.gpus), count=new.plan.count, nodes=new.plan.nodes,
                 policies={"estimated_hours": new.plan.estimated_hours}, market="spot")
    with store.store.transaction() as tx:
        repo.apply_jobs(tx, [repo.AppliedJob(m, f"h-{m.name}-{new.plan.nodes}")], now=now)


def test_a_preempted_node_ends_its_gang_after_the_job_was_reapplied_with_one_node(world) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    clock, store, aws, gcp, _monitor, rec = world
    two = spec(plan=replace(spec().plan, nodes=2))
    job = store.add_job(two, clock())
    settle(rec, clock)
    nodes = {a.node_rank: a for a in gang(store, job.id)}
    assert sorted(nodes) == [0, 1] and len(live(aws, gcp)) == 2
    _reapply(store, job, replace(two, plan=replace(two.plan, nodes=1)), clock())
    head = nodes[0]
    (aws if head.offer.provider == aws.name else gcp).preempt(head.instance_id or "")
    for _ in range(3):
        clock.advance(seconds=30)
        rec.tick()
    machines = {i.launch_id for i in live(aws, gcp)}
    assert nodes[1].launch_id not in machines               # before: node 1 ran on, billing
    [now_live] = gang(store, job.id)                         # before: none launched, the job RECOVERING for good
    assert now_live.generation > head.generation and now_live.launch_id in machines
