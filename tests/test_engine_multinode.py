"""Multi-node jobs in the engine: a gang of N attempts per start, node 0 first, restarted as a whole."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.engine.hooks import AgentReport
from orchestrator.engine.ports import AttemptRecord
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from providers.base import Capability, LaunchSpec, Market
from providers.errors import InsufficientCapacityError
from tests.fakes.memory_provider import MemoryProvider
from tests.fakes.memory_store import MemoryStore
from tests.test_engine import (  # noqa: F401
    CATALOG,
    Clock,
    engine,
    live,
    notice,
    offer,
    settle,
    spec,
    world,
)


@pytest.fixture
def gang_world(world):  # type: ignore[no-untyped-def]  # noqa: F811
    """test_engine's world (memory and SQLite stores) with a recording bootstrapper and a 2-node job."""
    clock, store, aws, gcp, monitor, rec = world
    boot = rec.hooks.bootstrapper
    job = store.add_job(spec(plan=replace(spec().plan, nodes=2)), clock())
    return clock, store, aws, gcp, monitor, rec, boot, job


def gang(store, job_id: int) -> list[AttemptRecord]:  # type: ignore[no-untyped-def]
    """The job's live nodes, not counting ones already being ended."""
    return [a for a in store.attempts_for_job(job_id)
            if a.state.is_live and a.state is not AttemptState.TERMINATE_REQUESTED]


def test_a_two_node_job_launches_a_gang_and_runs_once_node_1_joined_node_0(gang_world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _monitor, rec, boot, job = gang_world
    rec.tick()
    nodes = gang(store, job.id)
    assert sorted(a.node_rank for a in nodes) == [0, 1]
    assert len({a.generation for a in nodes}) == 1 and len({a.launch_id for a in nodes}) == 2
    assert all(a.offer == nodes[0].offer for a in nodes)            # one site: the same offer twice
    assert len(live(aws, gcp)) == 2
    settle(rec, clock)
    boot_order = [rank for _, rank, _, _ in boot.started]
    assert boot_order == [0, 1]
    head = next(i for i in live(aws, gcp) if i.launch_id == next(a for a in nodes if a.node_rank == 0).launch_id)
    (_, _, addr0, _), (_, _, addr1, key1) = boot.started
    assert addr0 is None and addr1 == head.private_ip and key1 == f"{head.provider}/{head.instance_id}"
    assert store.job(job.id).status is JobStatus.RUNNING


def test_a_gangs_nodes_carry_one_gang_key_and_the_next_start_another(gang_world, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The key the clouds name the gang's placement group after: one per start, none for one node."""
    clock, store, aws, gcp, _monitor, rec, _boot, job = gang_world
    sent: list[LaunchSpec] = []
    for p in (aws, gcp):
        real = p.launch
        monkeypatch.setattr(p, "launch", lambda s, real=real: (sent.append(s), real(s))[1])
    rec.tick()
    settle(rec, clock)
    assert sorted(s.node_rank for s in sent) == [0, 1]
    assert {s.gang for s in sent} == {f"j{job.id}-g{gang(store, job.id)[0].generation}"}
    node1 = next(a for a in gang(store, job.id) if a.node_rank == 1)
    (aws if node1.offer.provider == aws.name else gcp).preempt(node1.instance_id or "")
    clock.advance(seconds=30)
    rec.tick()
    assert len({s.gang for s in sent}) == 2, "the restarted gang is placed anew"
    single = store.add_job(spec(name="single"), clock())
    sent.clear()
    rec.tick()
    assert [s.gang for s in sent if s.job == single.spec.name] == [""]


def test_node_1_waits_for_node_0_and_the_job_is_launching_until_both_run(gang_world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _monitor, rec, boot, job = gang_world
    rec.tick()
    head = next(a for a in gang(store, job.id) if a.node_rank == 0)
    head_inst = next(i for i in live(aws, gcp) if i.launch_id == head.launch_id)
    boot.unreachable.add(head_inst.instance_id)
    for _ in range(3):
        clock.advance(seconds=30)
        rec.tick()
    assert boot.started == []                                  # node 1 never starts before node 0
    assert store.job(job.id).status is JobStatus.LAUNCHING
    boot.unreachable.clear()
    settle(rec, clock)
    assert [rank for _, rank, _, _ in boot.started] == [0, 1]
    assert store.job(job.id).status is JobStatus.RUNNING


def test_preempting_one_node_restarts_the_whole_gang_elsewhere(gang_world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _monitor, rec, _boot, job = gang_world
    rec.tick()
    settle(rec, clock)
    first = gang(store, job.id)
    store.record_checkpoint(job.id, first[0].id, "s3://ckpt/step-40", 40, clock())
    node1 = next(a for a in first if a.node_rank == 1)
    aws.preempt(node1.instance_id or "")
    clock.advance(seconds=30)
    report = rec.tick()
    assert report.preempted == 1 and report.relaunched == 1
    states = {a.node_rank: a.state for a in store.attempts_for_job(job.id) if a.generation == first[0].generation}
    assert states[1] is AttemptState.PREEMPTED and states[0] in (AttemptState.TERMINATE_REQUESTED,
                                                                  AttemptState.TERMINATED)
    second = gang(store, job.id)
    assert sorted(a.node_rank for a in second) == [0, 1]
    assert {a.generation for a in second} == {first[0].generation + 1}
    assert all(a.checkpoint_restored == "s3://ckpt/step-40" for a in second)
    assert all(a.offer.zone != node1.offer.zone for a in second)   # the preempted zone cools down
    settle(rec, clock)
    assert len(live(aws, gcp)) == 2                             # the old node 0 is gone, no leak
    assert store.job(job.id).status is JobStatus.RUNNING and store.job(job.id).relaunch_count == 1


def test_a_notice_on_node_1_drains_node_0_too(gang_world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, monitor, rec, _boot, job = gang_world
    rec.tick()
    settle(rec, clock)
    first = {a.node_rank: a for a in gang(store, job.id)}
    monitor.reports[first[1].instance_id or ""] = AgentReport(gpu_util_pct=(90.0,), notice=notice())
    clock.advance(seconds=10)
    rec.tick()
    # Node 0 may be the one writing the checkpoint: it keeps running for the drain, beside the new gang.
    assert len(live(aws, gcp)) == 4
    ended = {a.node_rank: a for a in store.attempts_for_job(job.id) if a.generation == first[0].generation}
    assert ended[0].state is AttemptState.TERMINATED and ended[0].drain_until is not None
    assert ended[1].end_cause is EndCause.NOTICED and ended[0].end_cause is EndCause.GANG
    clock.advance(minutes=3)
    rec.tick()
    assert {i.instance_id for i in live(aws, gcp)}.isdisjoint({first[0].instance_id, first[1].instance_id})
    assert len(live(aws, gcp)) == 2


def test_the_job_succeeds_once_every_node_exited_0_and_fails_if_one_fails(gang_world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, monitor, rec, _boot, job = gang_world
    rec.tick()
    settle(rec, clock)
    nodes = {a.node_rank: a for a in gang(store, job.id)}
    monitor.reports[nodes[1].instance_id or ""] = AgentReport(exit_code=0)
    clock.advance(seconds=30)
    rec.tick()
    assert store.job(job.id).status is JobStatus.RUNNING      # node 0 has not finished yet
    monitor.reports[nodes[0].instance_id or ""] = AgentReport(exit_code=0)
    clock.advance(seconds=30)
    rec.tick()
    assert store.job(job.id).status is JobStatus.SUCCEEDED and live(aws, gcp) == []

    other = store.add_job(replace(spec(plan=replace(spec().plan, nodes=2)), name="other"), clock())
    settle(rec, clock)
    nodes = {a.node_rank: a for a in gang(store, other.id)}
    monitor.reports[nodes[1].instance_id or ""] = AgentReport(exit_code=3)
    clock.advance(seconds=30)
    rec.tick()
    assert store.job(other.id).status is JobStatus.FAILED
    settle(rec, clock)
    assert live(aws, gcp) == []


def test_a_rank_refused_for_capacity_takes_another_offer_of_the_site_else_the_gang_moves_on() -> None:
    clock, store = Clock(), MemoryStore()
    site = [offer("aws", 10.0, zone="use1-az1", region="us-east-1"),
            replace(offer("aws", 10.5, zone="use1-az2", region="us-east-1"), instance_type="aws.8x-b"),
            offer("gcp", 12.0, region="us-central1")]
    aws, gcp = MemoryProvider("aws", site), MemoryProvider("gcp", site)
    rec = engine(store, {"aws": aws, "gcp": gcp}, site, clock)
    job = store.add_job(spec(plan=replace(spec().plan, nodes=2)), clock())
    aws.fail("launch", InsufficientCapacityError("az1 full", provider="aws"))
    # Node 0 is refused on az1 -> node 0 and node 1 both end up on the next offer that takes them.
    rec.tick()
    nodes = gang(store, job.id)
    assert sorted(a.node_rank for a in nodes) == [0, 1] and {a.offer.provider for a in nodes} == {"aws"}
    assert {a.offer.instance_type for a in nodes} == {"aws.8x-b"}
    # A second job: node 0 lands on az1, node 1 is refused there and takes az2 (same region).
    job2 = store.add_job(replace(spec(plan=replace(spec().plan, nodes=2)), name="two"), clock())
    aws.fail("launch", None, InsufficientCapacityError("az1 full", provider="aws"))
    rec.tick()
    nodes2 = {a.node_rank: a for a in gang(store, job2.id)}
    assert nodes2[0].offer.instance_type == "aws.8x" and nodes2[1].offer.instance_type == "aws.8x-b"
    # A third: node 0 lands on az1, AWS refuses node 1 on both offers -> that gang is ended; az2 refuses
    # node 0 too, so GCP takes the whole gang.
    job3 = store.add_job(replace(spec(plan=replace(spec().plan, nodes=2)), name="three"), clock())
    full = InsufficientCapacityError("full", provider="aws")
    aws.fail("launch", None, full, full, full)
    rec.tick()
    nodes3 = gang(store, job3.id)
    assert {a.offer.provider for a in nodes3} == {"gcp"} and sorted(a.node_rank for a in nodes3) == [0, 1]
    settle(rec, clock)
    mine = {a.launch_id for j in (job, job2, job3) for a in gang(store, j.id)}
    assert {i.launch_id for i in live(aws, gcp)} == mine               # the abandoned AWS node 0 is gone


def test_a_crash_between_planning_the_ranks_is_completed_on_restart(gang_world) -> None:  # type: ignore[no-untyped-def]
    clock, store, aws, gcp, _monitor, rec, _boot, job = gang_world
    # A previous process planned node 0 (LAUNCH_REQUESTED) and died before planning node 1.
    head = store.plan_attempt(job.id, CATALOG[0], "labcdefabcdef", None, clock())
    store.set_attempt_state(head.id, AttemptState.LAUNCH_REQUESTED, clock())
    store.set_job_status(job.id, JobStatus.LAUNCHING, clock())
    rec.tick()
    nodes = gang(store, job.id)
    assert sorted(a.node_rank for a in nodes) == [0, 1] and {a.generation for a in nodes} == {head.generation}
    settle(rec, clock)
    assert len(live(aws, gcp)) == 2 and store.job(job.id).status is JobStatus.RUNNING


def test_providers_without_multi_node_are_skipped_for_a_gang() -> None:
    clock, store = Clock(), MemoryStore()

    class SingleOnly(MemoryProvider):
        capabilities = MemoryProvider.capabilities - {Capability.MULTI_NODE}

    site = [offer("vast", 5.0), offer("aws", 10.0, market=Market.SPOT, region="us-east-1")]
    vast, aws = SingleOnly("vast", site), MemoryProvider("aws", site)
    rec = engine(store, {"vast": vast, "aws": aws}, site, clock)
    job = store.add_job(spec(plan=replace(spec().plan, nodes=2)), clock())
    single = store.add_job(replace(spec(), name="single"), clock())
    rec.tick()
    assert {a.offer.provider for a in gang(store, job.id)} == {"aws"}
    assert {a.offer.provider for a in gang(store, single.id)} == {"vast"}
