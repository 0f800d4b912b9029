"""Two daemons of one fleet on a PostgreSQL store, holding four running jobs and ticked until steady: what
tests/test_store_changes_pg.py and tests/test_fleet_steady_tick_pg.py watch a steady tick of."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.app.jobs import apply, load
from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, build_service
from orchestrator.store.db import Store
from tests.fakes.memory_provider import MemoryProvider
from tests.support.clock import ManualClock
from tests.test_engine_kept_reads import MANIFEST, OFFER

JOBS = ("one", "two", "three", "four")
TICK = timedelta(seconds=15)


@dataclass
class SteadyFleet:
    clock: ManualClock
    aws: MemoryProvider
    services: list[Service]      # d1, d2
    store: Store                 # d1's: another connection than d2's

    def tick_all(self) -> None:
        """Each daemon ticks once, then the clock moves a tick on."""
        for svc in self.services:
            svc.reconciler.tick()
        self.clock.now += TICK


@contextmanager
def steady_fleet(url: str, tmp_path: Path) -> Iterator[SteadyFleet]:
    """Two daemons (d1, d2) on ``url`` holding the four jobs of ``JOBS``, each running on the memory cloud after
    five rounds; closed after."""
    clock = ManualClock(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    aws = MemoryProvider("aws", [OFFER])
    services = [build_service(config=OrchConfig(owner="tester"), store_url=url, providers={"aws": aws},
                              catalog=[OFFER], lease_owner=name, clock=clock) for name in ("d1", "d2")]
    try:
        paths = []
        for name in JOBS:
            paths.append(tmp_path / f"{name}.yaml")
            paths[-1].write_text(MANIFEST.format(name=name))
        store = services[0].store
        assert store is not None
        apply(store, load(paths), now=clock.now)
        for svc in services:
            svc.engine_store.join(clock.now)  # type: ignore[attr-defined]
        fleet = SteadyFleet(clock, aws, services, store)
        for _ in range(5):
            fleet.tick_all()
        assert sorted(i.job or "" for i in aws.live()) == sorted(JOBS)
        yield fleet
    finally:
        for svc in services:
            svc.close()
