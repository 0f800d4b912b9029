"""The fleet's spot history as the policy's: overlapping machines of many jobs (live_history.py), the daemon
reading it once per tick (recovery_facts.py), and a new job's relaunch decided by other jobs' record."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.recovery_policy import RecoveryContext, SpotRun
from orchestrator.engine.states import AttemptState, EndCause, JobStatus
from orchestrator.policy.live_history import SharedHistory, place_history, stats_from
from orchestrator.policy.orch import OrchPolicy
from orchestrator.policy.recovery import SpotPolicyRecovery, recovery_for
from orchestrator.store import open_store, repo
from providers.base import Market, Offer
from tests.fakes.memory_provider import MemoryProvider
from tests.fakes.memory_store import MemoryStore
from tests.support.manifests import manifest
from tests.test_engine import OWNER, Clock, ReportingMonitor, SqlHarness, engine, live, offer, settle, spec

T0 = datetime(2026, 12, 1, tzinfo=UTC)
COOL = timedelta(minutes=30)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def run(start: float, end: float | None, preempted: bool, place: str = "az1") -> SpotRun:
    return SpotRun(place, at(start), None if end is None else at(end), preempted=preempted)


# --- many jobs' machines in one place, by hand ----------------------------------------------------------

def test_three_jobs_overlapping_in_one_zone_by_hand() -> None:
    runs = [
        run(0, 3, True), run(1, 3, True),       # jobs 1 and 2 preempted together at 3 h: ONE lifetime, 0-3 h
        run(4, 6, False),                       # job 3 from 4 h (the outage 3-4 h ends), moved off at 6 h
        run(5, 7, True),                        # job 1 again, overlapping: the place is up 4-7 h, ended by it
        run(6.5, 6.8, True),                    # job 2, preempted while job 1 survived: no end of availability
        run(8, None, False),                    # job 3 again from 8 h (the outage 7-8 h ends), running at 10 h
    ]
    stats = stats_from(runs, at(10), COOL)
    assert stats.up_runs == [3.0, 3.0] and stats.down_runs == [1.0, 1.0]
    assert (stats.ended_up_runs, stats.ended_up_h) == (2, 6.0)
    assert stats.seen_h == pytest.approx(10.0) and stats.up_h == pytest.approx(8.0)
    assert stats.available is True and stats.streak_h == pytest.approx(2.0)
    # The same machines in any order give the same history.
    assert stats_from(list(reversed(runs)), at(10), COOL) == stats


def test_a_preemption_survived_by_another_machine_ends_nothing_and_the_last_machine_decides() -> None:
    # Job 1 runs 0-5 h and finishes; job 2 is preempted at 2 h meanwhile: 5 h available, no end seen.
    survived = stats_from([run(0, 5, False), run(1, 2, True)], at(6), COOL)
    assert (survived.up_runs, survived.down_runs, survived.ended_up_runs) == ([], [], 0)
    assert survived.seen_h == pytest.approx(5.0) and survived.up_h == pytest.approx(5.0)
    # Reversed: job 2 outlives job 1 and is preempted at 5 h: one lifetime of 5 h, out since (0.5 h at 5.5 h).
    ended = stats_from([run(0, 2, False), run(1, 5, True)], at(5.5), COOL)
    assert ended.up_runs == [5.0] and ended.down_runs == [] and ended.available is False
    assert ended.streak_h == pytest.approx(0.5) and ended.seen_h == pytest.approx(5.5)


def test_a_machine_starting_as_the_last_one_is_preempted_follows_an_outage_of_zero() -> None:
    # Job 1 preempted at 2 h; job 2's machine started there at that very instant (as one job's relaunch would).
    stats = stats_from([run(0, 2, True), run(2, 4, True)], at(4.25), COOL)
    assert stats.up_runs == [2.0, 2.0] and stats.down_runs == [0.0]
    assert stats.available is False and stats.streak_h == pytest.approx(0.25)


def test_the_set_history_is_the_union_of_the_places_machines() -> None:
    # az1: job 1 0-3 h preempted; az2: job 2 2-6 h preempted, job 3 7 h on. The set had spot 0-6 h (az2 held
    # it when az1 went), out 6-7 h, spot since 7 h.
    runs = [run(0, 3, True), run(2, 6, True, "az2"), run(7, None, False, "az2")]
    (az1, az2), any_place = place_history(("az1", "az2"), runs, at(9), COOL)
    assert az1.up_runs == [3.0] and az1.down_runs == [] and az1.available is True     # its cool-down passed
    assert az2.up_runs == [4.0] and az2.down_runs == [1.0] and az2.streak_h == pytest.approx(2.0)
    assert any_place.up_runs == [6.0] and any_place.down_runs == [1.0]
    assert any_place.available and any_place.streak_h == pytest.approx(2.0)


def test_the_fleets_history_is_built_once_per_tick_and_shared_where_a_jobs_own_record_adds_nothing() -> None:
    fleet = (run(0, 3, True), run(1, 3, True), run(4, 6, False), run(4.5, None, False, "az2"))
    shared = SharedHistory()
    places = ("az1", "az2")
    first = shared.history(places, (fleet[1],), fleet, at(8), COOL)
    assert first == place_history(places, fleet, at(8), COOL)
    assert shared.history(places, (), fleet, at(8), COOL) is first            # another job, same tick: shared
    # A job whose record holds a machine the fleet's read has not (preempted at this tick): its own history.
    own = (run(4.5, 8, True, "az2"),)
    mine = shared.history(places, own, fleet, at(8), COOL)
    assert mine is not first and mine == place_history(places, own + fleet, at(8), COOL)
    assert mine[0][1].available is False and first[0][1].available is True
    # The next tick builds it again.
    assert shared.history(places, (), fleet, at(9), COOL) is not first


# --- the seam: fleet history, availability, spent ---------------------------------------------------------

def ctx(**kw: object) -> RecoveryContext:
    """A 10 h job due 30 h after T0, 5 h in with 4 h run, no machine; spot places az1 (k 0.3), az2 (k 0.35)."""
    base = RecoveryContext(
        now=at(5.0), relaunch_count=1, max_relaunches=50, markets=frozenset(Market), preemptions=[],
        cooldown=COOL, deadline=at(30), estimated_hours=10.0, remaining_hours=6.0, started_at=T0,
        running_hours=4.0, spot_places=("az1", "az2"), spot_price_ratio=0.3, spot_place_ratios=(0.3, 0.35))
    return replace(base, **kw)  # type: ignore[arg-type]


def test_the_seam_reads_the_fleet_history_beside_the_jobs_own() -> None:
    seam = SpotPolicyRecovery(OrchPolicy)
    # Other jobs met az1 flapping (12 machines of 3 min, each preempted), az2 holding 20 h until a preemption.
    flappy = tuple(run(-20 + 0.1 * i, -20 + 0.1 * i + 0.05, True) for i in range(12))
    stable = (run(-30, -10, True, "az2"), run(-9, -1, False, "az2"))
    assert "in az1" in seam.decide(ctx()).reason                          # nothing known: the cheaper
    assert "in az2" in seam.decide(ctx(fleet_runs=flappy + stable)).reason
    # The fleet's outage in progress (preempted 10 min ago, no machine since) makes the place unavailable.
    out = seam.observation(ctx(fleet_runs=(run(3, 4.9, True),)), seam.problem(ctx()))  # type: ignore[arg-type]
    assert out.available == (False, True) and out.history[0].up_runs == [pytest.approx(1.9)]
    # Past the cool-down (here none at all) the place is available again, as after the job's own preemption.
    spec_ = seam.problem(ctx())
    assert spec_ is not None
    assert seam.observation(ctx(fleet_runs=(run(3, 4.4, True),)), spec_).available == (True, True)
    assert seam.observation(ctx(cooldown=timedelta(0), fleet_runs=(run(3, 5, True),)), spec_).available == (True, True)


def test_the_seam_gives_the_policy_its_spend_in_on_demand_hours() -> None:
    seam = SpotPolicyRecovery(OrchPolicy)
    spec_ = seam.problem(ctx())
    assert spec_ is not None
    assert seam.observation(ctx(spent_usd=45.0, on_demand_hr=30.0), spec_).spent == pytest.approx(1.5)
    assert seam.observation(ctx(spent_usd=45.0), spec_).spent is None


# --- through the engine ------------------------------------------------------------------------------

def site() -> list[Offer]:
    return [offer("aws", 2.5, zone="az-c", region="us-east-1"), offer("aws", 3.0, zone="az-a", region="us-east-1"),
            offer("aws", 3.5, zone="az-b", region="us-east-1"),
            offer("gcp", 10.0, market=Market.ON_DEMAND, region="us-central1")]


def fleet_attempt(store: MemoryStore, job_id: int, zone: str, start_h: float, end_h: float, preempted: bool, *,
                  now: datetime, gpu: str = "A100-80G") -> None:
    """Another job's ended spot machine, ``start_h``..``end_h`` hours from ``now`` (negative: before)."""
    i = len(store.attempts) + 1
    store.attempts[i] = AttemptRecord(
        id=i, job_id=job_id, launch_id=f"fleet-{i}",
        state=AttemptState.PREEMPTED if preempted else AttemptState.SUCCEEDED,
        offer=replace(offer("aws", 3.0, zone=zone, region="us-east-1"), gpu=gpu),
        started_at=now + timedelta(hours=start_h), ended_at=now + timedelta(hours=end_h),
        end_cause=EndCause.PREEMPTED if preempted else EndCause.SUCCEEDED)


def record_fleet(store: MemoryStore, now: datetime, *, other_gpu_flapping_in_b: bool = False) -> None:
    # az-a flapped for other jobs yesterday (12 machines of 3 min, each preempted); az-b held one 20 h.
    for i in range(12):
        fleet_attempt(store, 100 + i % 3, "az-a", -20 + 0.1 * i, -20 + 0.1 * i + 0.05, True, now=now)
    fleet_attempt(store, 103, "az-b", -30, -10, True, now=now)
    fleet_attempt(store, 104, "az-b", -9, -1, False, now=now)
    if other_gpu_flapping_in_b:
        # An H100 machine preempted in az-b 30 min ago, within the cool-down: az-b's H100 spot is out now,
        # which says nothing of its A100 spot (counted, az-b would be out too).
        fleet_attempt(store, 105, "az-b", -0.8, -0.5, True, now=now, gpu="H100")


def new_job(store: MemoryStore | SqlHarness, clock: Clock) -> JobRecord:
    """A 10 h job due in 30 h whose preempted zones cool for 3 h."""
    if isinstance(store, MemoryStore):
        return store.add_job(replace(spec(plan=replace(spec().plan, estimated_hours=10.0)),
                                     cooldown=timedelta(hours=3), deadline=clock() + timedelta(hours=30)), clock())
    m = manifest("train", gpus=["A100-80G"], count=8,
                 policies={"estimated_hours": 10, "deadline": "30h", "preempted_zone_cooldown": "3h"})
    with store.store.transaction() as tx:
        repo.apply_jobs(tx, [repo.AppliedJob(m, "h-train")], now=clock())
        job_id = repo.require_job(tx, "train").id or 0
    return store.job(job_id)


def relaunched_zone(store: MemoryStore | SqlHarness, clock: Clock) -> str | None:
    """The new job: launched on the cheapest spot (az-c), preempted there before its machine started (so its
    own history is empty, az-c cooling for 3 h); where orch relaunches it."""
    offers = site()
    aws, gcp = MemoryProvider("aws", offers), MemoryProvider("gcp", offers)
    rec = engine(store, {"aws": aws, "gcp": gcp}, offers, clock, recovery=recovery_for("orch"),
                 monitor=ReportingMonitor())
    job = new_job(store, clock)
    rec.tick()
    [first] = live(aws, gcp)
    assert first.zone == "az-c"
    aws.preempt(first.instance_id)
    clock.advance(seconds=30)
    rec.tick()
    assert store.job(job.id).status is not JobStatus.FAILED
    [second] = live(aws, gcp)
    assert store.attempts_for_job(job.id)[0].started_at is None      # its own spot record: nothing
    return second.zone


def test_a_new_job_relaunches_where_the_fleet_found_spot_stable() -> None:
    clock = Clock()
    alone = relaunched_zone(MemoryStore(), clock)
    assert alone == "az-a"                                   # no history: the cheaper zone
    clock, store = Clock(), MemoryStore()
    record_fleet(store, clock())
    assert relaunched_zone(store, clock) == "az-b"           # the fleet's record: az-a's spot lasts minutes
    clock, store = Clock(), MemoryStore()
    record_fleet(store, clock(), other_gpu_flapping_in_b=True)
    assert relaunched_zone(store, clock) == "az-b"           # another GPU model's flapping is not az-b's A100


def test_on_sqlite_too_a_new_job_relaunches_where_the_fleet_found_spot_stable(tmp_path: Path) -> None:
    def sql(name: str) -> SqlHarness:
        return SqlHarness(open_store(f"sqlite:///{tmp_path / name}"), OWNER, catalog=site())

    assert relaunched_zone(sql("alone.db"), Clock()) == "az-a"
    clock, store = Clock(), sql("fleet.db")
    others = [store.add_job(spec(name=f"other-{n}"), clock() - timedelta(days=2)) for n in range(2)]
    for other in others:
        store.request_down(other.id)            # done: only their record is left
    for i in range(12):
        sql_machine(store, others[i % 2].id, "az-a", -20 + 0.1 * i, -20 + 0.1 * i + 0.05, True, now=clock())
    sql_machine(store, others[0].id, "az-b", -30, -10, True, now=clock())
    sql_machine(store, others[1].id, "az-b", -9, -1, False, now=clock())
    assert relaunched_zone(store, clock) == "az-b"


def sql_machine(store: SqlHarness, job_id: int, zone: str, start_h: float, end_h: float, preempted: bool, *,
                now: datetime) -> None:
    """``fleet_attempt`` on the SQL store: planned, running from ``start_h``, ended at ``end_h``."""
    a = store.plan_attempt(job_id, offer("aws", 3.0, zone=zone, region="us-east-1"), f"fleet-{zone}-{start_h}",
                           None, now + timedelta(hours=start_h))
    store.set_attempt_state(a.id, AttemptState.RUNNING, now + timedelta(hours=start_h))
    store.set_attempt_state(a.id, AttemptState.PREEMPTED if preempted else AttemptState.SUCCEEDED,
                            now + timedelta(hours=end_h), cause=EndCause.PREEMPTED if preempted else EndCause.SUCCEEDED)


@pytest.mark.parametrize("jobs", [1, 4])
def test_the_fleet_history_is_read_once_per_tick_whatever_the_number_of_jobs(jobs: int) -> None:
    clock, store = Clock(), MemoryStore()
    offers = site()
    aws, gcp = MemoryProvider("aws", offers), MemoryProvider("gcp", offers)
    rec = engine(store, {"aws": aws, "gcp": gcp}, offers, clock, recovery=recovery_for("orch"),
                 monitor=ReportingMonitor())
    for n in range(jobs):
        store.add_job(replace(spec(name=f"train-{n}", plan=replace(spec().plan, estimated_hours=10.0)),
                              deadline=clock() + timedelta(hours=30)), clock())
    settle(rec, clock)
    assert len(live(aws, gcp)) == jobs and all(i.market is Market.SPOT for i in live(aws, gcp))
    # Every tick the policy reviews each running spot job (its deadline): one read of the fleet's record.
    before = store.history_reads
    for _ in range(3):
        clock.advance(minutes=1)
        rec.tick()
    assert store.history_reads - before == 3
    rec.tick()                                  # a tick at the same clock reading reads it again too
    assert store.history_reads - before == 4


def test_a_policy_that_reads_no_history_costs_no_read() -> None:
    clock, store = Clock(), MemoryStore()
    offers = site()
    aws, gcp = MemoryProvider("aws", offers), MemoryProvider("gcp", offers)
    rec = engine(store, {"aws": aws, "gcp": gcp}, offers, clock, monitor=ReportingMonitor(),
                 recovery=recovery_for("default"))
    job = store.add_job(replace(spec(plan=replace(spec().plan, estimated_hours=10.0)),
                                deadline=clock() + timedelta(hours=30)), clock())
    rec.tick()
    [first] = live(aws, gcp)
    aws.preempt(first.instance_id)
    clock.advance(seconds=30)
    rec.tick()
    assert store.job(job.id).relaunch_count == 1 and store.history_reads == 0


def test_the_daemons_facts_give_the_fleets_machines_in_the_jobs_places_on_its_gpus_and_the_on_demand_price() -> None:
    clock, store = Clock(), MemoryStore()
    offers = site()
    rec = engine(store, {"aws": MemoryProvider("aws", offers), "gcp": MemoryProvider("gcp", offers)}, offers, clock,
                 recovery=recovery_for("orch"))
    job = store.add_job(replace(spec(plan=replace(spec().plan, estimated_hours=10.0)),
                                deadline=clock() + timedelta(hours=30)), clock())
    now = clock()
    fleet_attempt(store, 7, "az-a", -5, -4, True, now=now)                  # in
    fleet_attempt(store, 7, "az-b", -3, -2, False, now=now, gpu="")         # in: no GPU model named
    fleet_attempt(store, 8, "az-b", -6, -5, True, now=now, gpu="H100")      # out: another GPU model
    fleet_attempt(store, 8, "az-z", -6, -5, True, now=now)                  # out: not one of its places
    fleet_attempt(store, 8, "az-a", -200, -190, True, now=now)              # out: before the fleet's window
    ctx = rec._recovery.facts.context(rec.deps, replace(job, spent_usd=25.0), now)
    assert ctx.spot_places == ("az-c", "az-a", "az-b") and ctx.on_demand_hr == pytest.approx(10.0)
    assert [(r.place, r.started_at, r.preempted) for r in ctx.fleet_runs] == [
        ("az-a", now - timedelta(hours=5), True), ("az-b", now - timedelta(hours=3), False)]
    spec_ = rec.deps.hooks.recovery.problem(ctx)  # type: ignore[attr-defined]
    assert rec.deps.hooks.recovery.observation(ctx, spec_).spent == pytest.approx(2.5)  # type: ignore[attr-defined]
