"""The SQL store's read of the fleet's spot history (``SqlEngineStore.spot_history``), on SQLite and, where
ORCH_TEST_DATABASE_URL is set, PostgreSQL: which machines it returns, with which flags, in which order."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.engine.ports import FleetSpotRun
from orchestrator.engine.recovery_policy import SpotRun
from orchestrator.engine.states import AttemptState, EndCause
from orchestrator.store import open_store
from providers.base import Market
from tests._store_db import BACKENDS, database_url_for
from tests.test_engine import OWNER, SqlHarness, offer, spec

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SINCE = NOW - timedelta(days=7)
_ids = itertools.count()


def ago(hours: float) -> datetime:
    return NOW - timedelta(hours=hours)


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from database_url_for(request.param, tmp_path)


def machine(store: SqlHarness, job_id: int, zone: str, started: float | None, ended: float | None,
            cause: EndCause | None = None, *, market: Market = Market.SPOT, rank: int = 0, gpu: str = "A100-80G",
            generation: int | None = None) -> None:
    """An attempt whose machine started ``started`` hours ago (None: never) and ended ``ended`` hours ago
    (None: still running), for ``cause`` (PREEMPTED/NOTICED: preempted; else it succeeded)."""
    o = replace(offer("aws", 3.0, market, zone=zone, region="us-east-1"), gpu=gpu)
    planned = ago(started if started is not None else (ended or 0) + 0.1)
    a = store.plan_attempt(job_id, o, f"l-{next(_ids)}", None, planned,
                           node_rank=rank, generation=generation)
    if started is not None:
        store.set_attempt_state(a.id, AttemptState.RUNNING, ago(started))
    if ended is not None:
        preempted = cause in (EndCause.PREEMPTED, EndCause.NOTICED)
        store.set_attempt_state(a.id, AttemptState.PREEMPTED if preempted else AttemptState.SUCCEEDED, ago(ended),
                                cause=cause or EndCause.SUCCEEDED)


def test_the_fleet_history_holds_every_jobs_started_spot_machines_up_in_the_window(url: str) -> None:
    backend = open_store(url)
    mine, theirs = SqlHarness(backend, OWNER), SqlHarness(backend, "someone-else")
    one, two = mine.add_job(spec(name="one"), ago(300)), mine.add_job(spec(name="two"), ago(300))
    machine(mine, one.id, "az1", 48, 24, EndCause.PREEMPTED)                       # in: preempted a day ago
    machine(mine, one.id, "az2", 240, 192)                                         # out: ended 8 days ago
    machine(mine, one.id, "az2", 240, None)                                        # in: up since 10 days
    machine(mine, two.id, "az1", 1, 0.5, EndCause.NOTICED, generation=1)           # in: noticed
    machine(mine, two.id, "az1", 1, 0.5, EndCause.NOTICED, rank=1, generation=1)   # out: a gang's other node
    machine(mine, two.id, "az3", 3, 2, market=Market.ON_DEMAND)                    # out: on-demand
    machine(mine, two.id, "az3", None, 2, EndCause.PREEMPTED)                      # out: never started
    machine(mine, two.id, "az4", 5, 4, gpu="H100")                                 # in: the reader filters GPUs
    other = theirs.add_job(spec(name="three"), ago(300))
    machine(theirs, other.id, "az1", 6, None)                                      # out: another owner's
    assert list(mine.spot_history(SINCE)) == [
        FleetSpotRun(one.id, "A100-80G", SpotRun("az2", ago(240), None, preempted=False)),
        FleetSpotRun(one.id, "A100-80G", SpotRun("az1", ago(48), ago(24), preempted=True)),
        FleetSpotRun(two.id, "H100", SpotRun("az4", ago(5), ago(4), preempted=False)),
        FleetSpotRun(two.id, "A100-80G", SpotRun("az1", ago(1), ago(0.5), preempted=True, noticed=True)),
    ]
    assert [f.run.place for f in theirs.spot_history(SINCE)] == ["az1"]
    # A window reaching back 9 days holds the machine that ended 8 days ago too.
    assert len(mine.spot_history(NOW - timedelta(days=9))) == 5
