"""One cloud listing per provider per tick for a fleet of daemons on PostgreSQL (orchestrator/store/listings.py,
orchestrator/daemon/fencing.py): counted at the wire fakes, and a listing older than a launch never makes that launch
look lost."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orchestrator.engine.states import AttemptState
from orchestrator.store import open_store
from orchestrator.store.listings import (
    Deference,
    Listing,
    ListingCache,
    instance_from_json,
    instance_to_json,
    published,
    shared_listing,
)
from providers.base import Instance, InstanceState, Market
from providers.fabric import Fabric
from tests.daemon_world import OWNER, PUBLIC_KEY, Clock, Fakes, add_job, check_invariants, service_for
from tests.test_multi_daemon_pg import tick_all

pytestmark = pytest.mark.postgres
SETTINGS_TTL = timedelta(seconds=60)


def list_calls(fakes: Fakes) -> dict[str, int]:
    """The instance list calls each fake has answered."""
    return {"lambda": sum(1 for r in fakes.lam.requests if r.method == "GET" and r.path.endswith("/instances")),
            "vastai": sum(1 for r in fakes.vast.requests if r.method == "GET" and "/instances" in r.path)}


def test_four_daemons_list_each_cloud_once_per_tick(pg_url: str, fakes: Fakes) -> None:
    from orchestrator.daemon.assembly import ServiceSettings

    clock = Clock()
    settings = ServiceSettings(orphan_grace=timedelta(minutes=5), lease_ttl=SETTINGS_TTL, ssh_public_key=PUBLIC_KEY)
    daemons = {name: service_for(fakes, pg_url, clock=clock, lease_owner=name, settings=settings)
               for name in ("d1", "d2", "d3", "d4")}
    admin = open_store(pg_url)
    try:
        for n in range(6):
            add_job(admin, f"lam-{n}", providers=["lambda"])
        add_job(admin, "vast", providers=["vastai"])        # the Vast fake has one machine to rent
        tick_all(daemons, clock, rounds=4)          # launched, adopted, running
        check_invariants(fakes, admin)
        before = list_calls(fakes)
        rounds = 5
        tick_all(daemons, clock, rounds=rounds)
        after = list_calls(fakes)
        calls = {p: after[p] - before[p] for p in after}
        print(f"\nshared listing: 4 daemons, {rounds} rounds: list calls per provider {calls}")
        assert calls == {"lambda": rounds, "vastai": rounds}
        check_invariants(fakes, admin)
        # Each daemon really ticked on each listing (its own or the one published for it).
        assert sum(s.reconciler.deps.providers["lambda"].listings for s in daemons.values()) >= rounds
    finally:
        for service in daemons.values():
            service.close()
        admin.close()


def test_daemons_starting_together_list_each_cloud_once_in_their_first_tick(pg_url: str, fakes: Fakes) -> None:
    # A daemon's first listing is the fleet's too: the first to the listing lock lists, the others take its
    # publication (orchestrator/daemon/fencing.py). Before, each daemon's first listing was its own.
    from orchestrator.daemon.assembly import ServiceSettings

    clock = Clock()
    settings = ServiceSettings(orphan_grace=timedelta(minutes=5), lease_ttl=SETTINGS_TTL, ssh_public_key=PUBLIC_KEY)
    admin = open_store(pg_url)
    for n in range(4):
        add_job(admin, f"lam-{n}", providers=["lambda"])
    first = service_for(fakes, pg_url, clock=clock, lease_owner="d0", settings=settings)
    for _ in range(3):                  # launched, adopted, running; then the fleet stops
        clock.advance(seconds=10)
        first.reconciler.tick()
    first.close()
    clock.advance(seconds=SETTINGS_TTL.total_seconds() + 1)     # d0's registration lapses: its jobs are free
    daemons = {name: service_for(fakes, pg_url, clock=clock, lease_owner=name, settings=settings)
               for name in ("d1", "d2", "d3", "d4")}
    try:
        for service in daemons.values():      # restarted together: each registered before any ticks
            service.engine_store.join(clock())  # type: ignore[attr-defined]
        before = list_calls(fakes)
        tick_all(daemons, clock, rounds=1)
        after = list_calls(fakes)
        assert {p: after[p] - before[p] for p in after} == {"lambda": 1, "vastai": 1}
        assert sum(s.reconciler.deps.providers["lambda"].listings for s in daemons.values()) == 1
        tick_all(daemons, clock, rounds=3)
        check_invariants(fakes, admin)
    finally:
        for service in daemons.values():
            service.close()
        admin.close()


def test_a_daemon_joining_a_fleet_shares_its_first_listing(pg_url: str, fakes: Fakes) -> None:
    from orchestrator.daemon.assembly import ServiceSettings

    clock = Clock()
    settings = ServiceSettings(orphan_grace=timedelta(minutes=5), lease_ttl=SETTINGS_TTL, ssh_public_key=PUBLIC_KEY)
    daemons = {name: service_for(fakes, pg_url, clock=clock, lease_owner=name, settings=settings)
               for name in ("d1", "d2", "d3")}
    admin = open_store(pg_url)
    try:
        for n in range(3):
            add_job(admin, f"lam-{n}", providers=["lambda"])
        tick_all(daemons, clock, rounds=4)
        daemons["d4"] = service_for(fakes, pg_url, clock=clock, lease_owner="d4", settings=settings)
        for _ in range(3):      # the fleet's one listing, the newcomer's first tick included
            before = list_calls(fakes)["lambda"]
            tick_all(daemons, clock, rounds=1)
            assert list_calls(fakes)["lambda"] - before == 1
        check_invariants(fakes, admin)
    finally:
        for service in daemons.values():
            service.close()
        admin.close()


def test_a_listing_older_than_a_launch_does_not_make_it_look_lost(pg_url: str, fakes: Fakes) -> None:
    from orchestrator.daemon.assembly import ServiceSettings

    clock = Clock()
    settings = ServiceSettings(orphan_grace=timedelta(minutes=5), lease_ttl=SETTINGS_TTL, ssh_public_key=PUBLIC_KEY)
    daemon = service_for(fakes, pg_url, clock=clock, lease_owner="d1", settings=settings)
    # A second member of the fleet (it never ticks): a daemon alone in the fleet does not share its listings.
    member = service_for(fakes, pg_url, clock=clock, lease_owner="d2", settings=settings)
    member.engine_store.join(clock())  # type: ignore[attr-defined]
    admin = open_store(pg_url)

    def publish_empty() -> None:
        """Another daemon's listing of Lambda, taken before d1's launch reached the cloud: it lacks d1's machine."""
        shared_listing(admin, "lambda", OWNER, lister="other", now=clock(), max_age=timedelta(0),
                       min_version=2**62, ask=lambda: [])

    try:
        job = add_job(admin, "lam", providers=["lambda"])
        publish_empty()
        daemon.reconciler.tick()                     # uses the fresh published listing, then launches the job
        with admin.transaction() as tx:
            from sqlmodel import select

            from orchestrator.store.models import Attempt
            attempts = list(tx.exec(select(Attempt).where(Attempt.job_id == job)))
        assert [AttemptState(a.state) for a in attempts] == [AttemptState.LAUNCHED]
        clock.advance(seconds=1)
        publish_empty()                              # fresh for d1's next tick, and older than its launch
        daemon.reconciler.tick()
        with admin.transaction() as tx:
            states = [AttemptState(a.state) for a in tx.exec(select(Attempt).where(Attempt.job_id == job))]
        assert len(states) == 1 and states[0].is_live, states      # not failed as "instance disappeared"
        found = published(admin, "lambda", OWNER)
        assert found is not None and [i.launch_id for i in found[1]] == [attempts[0].launch_id]   # d1 listed
        assert found[0] == 3        # the other's two publications, then d1's own
    finally:
        daemon.close()
        member.close()
        admin.close()


def test_a_fresh_listing_is_taken_from_the_store_and_a_stale_one_is_not(pg_url: str) -> None:
    store = open_store(pg_url)
    clock = Clock()
    asked: list[str] = []

    def ask(who: str) -> list[Instance]:
        asked.append(who)
        return [Instance("lambda", f"i-{who}", "l1", OWNER, InstanceState.RUNNING, "gpu_1x_a100", "us-west-2")]

    def refuse() -> list[Instance]:
        raise RuntimeError("the cloud refused")

    try:
        first = shared_listing(store, "lambda", OWNER, lister="a", now=clock(), max_age=timedelta(seconds=7),
                               min_version=0, ask=lambda: ask("a"))
        assert not first.shared and first.version == 1
        b_cache = ListingCache()
        second = shared_listing(store, "lambda", OWNER, lister="b", now=clock(), max_age=timedelta(seconds=7),
                                min_version=0, ask=lambda: ask("b"), cache=b_cache)
        assert second.shared and second.instances == first.instances and asked == ["a"]
        decoded = b_cache.decoded[("lambda", OWNER)]
        clock.advance(seconds=8)
        again = shared_listing(store, "lambda", OWNER, lister="a", now=clock(), max_age=timedelta(seconds=7),
                               min_version=0, ask=lambda: ask("a"))                 # the same machines
        assert not again.shared and again.version == 2 and asked == ["a", "a"]
        reread = shared_listing(store, "lambda", OWNER, lister="b", now=clock(), max_age=timedelta(seconds=7),
                                min_version=0, ask=lambda: ask("b"), cache=b_cache)
        assert reread.shared and reread.instances == first.instances
        assert b_cache.decoded[("lambda", OWNER)] is decoded                      # not fetched nor decoded again
        clock.advance(seconds=8)
        third = shared_listing(store, "lambda", OWNER, lister="b", now=clock(), max_age=timedelta(seconds=7),
                               min_version=0, ask=lambda: ask("b"))
        assert not third.shared and third.version == 3 and asked == ["a", "a", "b"]
        fourth = shared_listing(store, "lambda", OWNER, lister="a", now=clock(), max_age=timedelta(seconds=7),
                                min_version=0, ask=lambda: ask("a"), cache=b_cache)
        assert fourth.shared and fourth.instances == third.instances != first.instances   # new machines: read
        with pytest.raises(RuntimeError):        # a failed cloud call publishes nothing
            shared_listing(store, "lambda", OWNER, lister="c", now=clock() + timedelta(seconds=60),
                           max_age=timedelta(seconds=7), min_version=0, ask=refuse)
        assert published(store, "lambda", OWNER) == (3, third.instances)
    finally:
        store.close()


def test_a_daemon_that_did_not_list_last_steps_back_for_the_daemon_that_did(pg_url: str) -> None:
    # The lister changing costs the fleet the new lister's first decode of the whole listing (~0.2 s at 10k):
    # a daemon finding the listing stale and nobody listing yet pauses for the last lister before it lists.
    store = open_store(pg_url)
    clock = Clock()
    asked: list[str] = []

    def ask(who: str) -> list[Instance]:
        asked.append(who)
        return [Instance("lambda", f"i-{len(asked)}", "l1", OWNER, InstanceState.RUNNING, "gpu_1x_a100", "us-west-2")]

    def listing(who: str, defer: Deference | None = None) -> Listing:
        return shared_listing(store, "lambda", OWNER, lister=who, now=clock(), max_age=timedelta(seconds=7),
                              min_version=0, ask=lambda: ask(who), defer=defer)

    paused: list[float] = []

    def lister_arrives(seconds: float) -> None:     # while b pauses, a (the last lister) comes and lists
        paused.append(seconds)
        listing("a")

    try:
        assert listing("a").version == 1
        clock.advance(seconds=8)                                   # stale: a new tick
        got = listing("b", Deference(pauses=3, pause_s=0.01, pause=lister_arrives))
        assert got.shared and got.version == 2 and asked == ["a", "a"] and paused == [0.01]
        clock.advance(seconds=8)                                   # a is gone: b waits its pauses, then lists
        paused.clear()
        got = listing("b", Deference(pauses=3, pause_s=0.01, pause=paused.append))
        assert not got.shared and got.version == 3 and asked == ["a", "a", "b"] and paused == [0.01] * 3
        clock.advance(seconds=8)                                   # b listed last: it does not step back for itself
        paused.clear()
        got = listing("b", Deference(pauses=3, pause_s=0.01, pause=paused.append))
        assert not got.shared and got.version == 4 and asked == ["a", "a", "b", "b"] and paused == []
        clock.advance(seconds=8)                                   # without a deference: at once, as before
        got = listing("c")
        assert not got.shared and got.version == 5 and asked[-1] == "c"
    finally:
        store.close()


def test_an_instance_survives_the_store_round_trip() -> None:
    from datetime import UTC, datetime

    inst = Instance("aws", "i-1", "l-1", OWNER, InstanceState.UNREACHABLE, "p4d.24xlarge", "us-east-1", "use1-az1",
                    Market.SPOT, "job", "running", "why", "1.2.3.4", "10.0.0.1", 2222, "ubuntu", ("ssh-ed25519 AAAA",),
                    datetime(2026, 12, 1, 12, 0, tzinfo=UTC), 32.7, (("k", "v"),), Fabric.EFA)
    assert instance_from_json(instance_to_json(inst)) == inst


def test_a_fresh_listing_is_read_without_waiting_on_the_lock(pg_url: str) -> None:
    # The daemons coming after the lister's commit do not queue on the row: here another transaction holds its
    # lock (a daemon electing itself), and a fresh publication is still taken at once, the cloud not asked.
    from sqlalchemy import select

    from orchestrator.store.models import ListingRow

    store, other = open_store(pg_url), open_store(pg_url)
    clock = Clock()
    asked: list[str] = []

    def ask(who: str) -> list[Instance]:
        asked.append(who)
        return [Instance("lambda", f"i-{who}", "l1", OWNER, InstanceState.RUNNING, "gpu_1x_a100", "us-west-2")]

    try:
        first = shared_listing(store, "lambda", OWNER, lister="a", now=clock(), max_age=timedelta(seconds=7),
                               min_version=0, ask=lambda: ask("a"))
        table = ListingRow.__table__  # type: ignore[attr-defined]
        with other.transaction() as tx:
            tx.connection().execute(select(table.c.version).where(table.c.provider == "lambda").with_for_update())
            for cache in (ListingCache(), ListingCache()):       # fetched and decoded, then as well from a cache
                got = shared_listing(store, "lambda", OWNER, lister="b", now=clock(), max_age=timedelta(seconds=7),
                                     min_version=0, ask=lambda: ask("b"), cache=cache,
                                     lock_wait=timedelta(milliseconds=50))
                assert got.shared and got.instances == first.instances and got.version == 1
                again = shared_listing(store, "lambda", OWNER, lister="b", now=clock(),
                                       max_age=timedelta(seconds=7), min_version=0, ask=lambda: ask("b"),
                                       cache=cache, lock_wait=timedelta(milliseconds=50))
                assert again.shared and again.instances == first.instances
            # Not fresh for a caller that launched since (min_version above it): it waits, gives up, lists alone.
            alone = shared_listing(store, "lambda", OWNER, lister="b", now=clock(), max_age=timedelta(seconds=7),
                                   min_version=2, ask=lambda: ask("b"), lock_wait=timedelta(milliseconds=50))
            assert not alone.shared and alone.version is None
        assert asked == ["a", "b"]
    finally:
        store.close()
        other.close()


def test_the_last_lister_lists_as_its_tick_begins_before_its_claim(pg_url: str, fakes: Fakes) -> None:
    # The lister stays the same: the daemon whose listing was published last takes it again before its claim
    # (orchestrator/daemon/fencing.py). Here d1 is held right after its claim while d2 ticks: d2 already finds
    # d1's listing of this tick, and asks no cloud.
    import threading

    from orchestrator.daemon.assembly import ServiceSettings

    clock = Clock()
    settings = ServiceSettings(orphan_grace=timedelta(minutes=5), lease_ttl=SETTINGS_TTL, ssh_public_key=PUBLIC_KEY)
    admin = open_store(pg_url)
    daemons = {name: service_for(fakes, pg_url, clock=clock, lease_owner=name, settings=settings)
               for name in ("d1", "d2")}
    d1, d2 = daemons["d1"], daemons["d2"]
    try:
        add_job(admin, "lam", providers=["lambda"])
        for service in daemons.values():
            service.engine_store.join(clock())  # type: ignore[attr-defined]
        for _ in range(3):
            clock.advance(seconds=10)
            d1.reconciler.tick()                # d1 first: its listing is the one published
            d2.reconciler.tick()
        lister = d1.reconciler.deps.providers["lambda"]
        asked = (lister.listings, d2.reconciler.deps.providers["lambda"].listings)
        claimed, go_on = threading.Event(), threading.Event()
        begin_tick = d1.engine_store.begin_tick

        def held_after_the_claim(now):  # type: ignore[no-untyped-def]
            holding = begin_tick(now)
            claimed.set()
            assert go_on.wait(timeout=60)
            return holding

        d1.engine_store.begin_tick = held_after_the_claim  # type: ignore[method-assign]
        clock.advance(seconds=10)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                d1.reconciler.tick()
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        assert claimed.wait(timeout=60)
        d2.reconciler.tick()                    # d1 has not reached its sync yet
        go_on.set()
        thread.join(timeout=60)
        assert not errors, errors
        assert (lister.listings, d2.reconciler.deps.providers["lambda"].listings) == (asked[0] + 1, asked[1])
        check_invariants(fakes, admin)
    finally:
        for service in daemons.values():
            service.close()
        admin.close()
