"""A machine belongs to one store (issue 28, item 5): two stores sharing one cloud account and one owner
name never end each other's machines, over an hour of fake time, while each still ends its own orphans.

Before, each store's sweep took the other's machines for orphans (tagged with the same owner, launch ids
it did not know) and ended them after the grace; the other then saw a preemption and relaunched.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlmodel import select

from orchestrator.daemon.assembly import Service, ServiceSettings
from orchestrator.store import open_store
from orchestrator.store.models import Attempt, Event
from providers.base import LaunchSpec, launch_store, new_launch_id
from tests.daemon_world import LAMBDA_A100, OWNER, PUBLIC_KEY, Clock, Fakes, add_job, service_for

SETTINGS = ServiceSettings(orphan_grace=timedelta(minutes=5), ssh_public_key=PUBLIC_KEY,
                           # no agent reports in this world: keep liveness out of the picture
                           boot_timeout=timedelta(hours=10), heartbeat_timeout=timedelta(hours=10))


def _stores(fakes: Fakes, tmp_path: Path, clock: Clock) -> dict[str, Service]:
    return {name: service_for(fakes, f"sqlite:///{tmp_path / name / 'orch.db'}", clock=clock, settings=SETTINGS)
            for name in ("a", "b")}


def _attempts(service: Service) -> list[Attempt]:
    assert service.store is not None
    with service.store.transaction() as tx:
        return list(tx.exec(select(Attempt)))


def _events(service: Service, kind: str) -> list[Event]:
    assert service.store is not None
    with service.store.transaction() as tx:
        return list(tx.exec(select(Event).where(Event.kind == kind)))


def test_two_stores_on_one_account_and_owner_never_end_each_others_machines(fakes: Fakes, tmp_path: Path) -> None:
    clock = Clock()
    stores = _stores(fakes, tmp_path, clock)
    try:
        for name, service in stores.items():
            assert service.store is not None
            for n in range(3):
                add_job(service.store, f"{name}-job-{n}", now=clock(), providers=["lambda"])
        for _ in range(120):                           # one hour, a tick every 30 s
            clock.advance(seconds=30)
            for service in stores.values():
                service.reconciler.tick()
        ended_by_other = {name: sum(a.state != "running" for a in _attempts(s)) for name, s in stores.items()}
        orphans = {name: len(_events(s, "orphan-terminated")) for name, s in stores.items()}
        assert orphans == {"a": 0, "b": 0} and ended_by_other == {"a": 0, "b": 0}, (orphans, ended_by_other)
        assert {name: len(_attempts(s)) for name, s in stores.items()} == {"a": 3, "b": 3}   # no relaunch
        assert len(fakes.live_instances()["lambda"]) == 6
        ids = {name: {launch_store(a.launch_id) for a in _attempts(s)} for name, s in stores.items()}
        assert len(ids["a"]) == len(ids["b"]) == 1 and ids["a"] != ids["b"] and None not in ids["a"] | ids["b"]
    finally:
        for service in stores.values():
            service.close()


def test_a_store_still_ends_its_own_orphans_and_old_style_ones(fakes: Fakes, tmp_path: Path) -> None:
    """Its own (a launch id with its id the store never wrote: a crash between the cloud's yes and the
    write) and one made before stores had identities; another store's stays."""
    clock = Clock()
    stores = _stores(fakes, tmp_path, clock)
    try:
        a_id = stores["a"].reconciler.deps.config.store_id
        b_id = stores["b"].reconciler.deps.config.store_id
        assert launch_store(new_launch_id(a_id)) == a_id and a_id != b_id
        cloud = fakes.build_providers()["lambda"]
        planted = {}
        for what, launch_id in (("own", new_launch_id(a_id)), ("old", new_launch_id()),
                                ("other", new_launch_id(b_id))):
            planted[what] = cloud.launch(LaunchSpec(launch_id, OWNER, "ghost", LAMBDA_A100,
                                                    ssh_public_key=PUBLIC_KEY)).launch_id
        cloud.close()
        for _ in range(12):
            clock.advance(seconds=60)
            stores["a"].reconciler.tick()
        left = {i.launch_id for i in fakes.live_instances()["lambda"]}
        assert left == {planted["other"]}
        named = " ".join(e.message for e in _events(stores["a"], "orphan-terminated"))
        assert planted["own"] in named and planted["old"] in named and planted["other"] not in named
    finally:
        for service in stores.values():
            service.close()


def test_the_store_id_is_drawn_once_and_kept(tmp_path: Path) -> None:
    from orchestrator.store.identity import store_id

    url = f"sqlite:///{tmp_path / 'orch.db'}"
    first = open_store(url)
    try:
        drawn = store_id(first)
        assert drawn == store_id(first)
    finally:
        first.close()
    again = open_store(url)
    try:
        assert store_id(again) == drawn
    finally:
        again.close()
    other = open_store(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        assert store_id(other) != drawn
    finally:
        other.close()
