"""``orch status``: each machine's quoted $/h (the offer's) beside the actual $/h its cloud reports, and the
burn rate charged at the actual price where there is one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.app import jobs as app_jobs
from orchestrator.app import status as app_status
from orchestrator.engine.events import EventKind
from orchestrator.money.spend import charged_price_hr
from orchestrator.store import Store, repo
from providers.base import InstanceState, Market
from tests._store_db import BACKENDS, open_test_store
from tests.test_jobs_service import manifests


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from open_test_store(request.param, tmp_path)


def test_charged_price_is_the_reported_one_else_the_offers() -> None:
    assert charged_price_hr(0.412, 0.40) == 0.412
    assert charged_price_hr(None, 0.40) == 0.40
    assert charged_price_hr(0.0, 0.40) == 0.0                   # a free machine is a report, not a gap
    for nonsense in (float("nan"), float("inf"), -1.0):
        assert charged_price_hr(nonsense, 0.40) == 0.40


def test_status_shows_quoted_and_actual(tmp_path: Path, store: Store) -> None:
    app_jobs.apply(store, manifests(tmp_path, "a", "b"))
    with store.transaction() as tx:
        for name, launch, actual in (("a", "la00000000001", 0.4171), ("b", "lb00000000001", None)):
            job = repo.require_job(tx, name)
            repo.create_attempt(tx, job.id, launch)
            repo.record_instance(tx, repo.InstanceRecord(
                provider="vastai", launch_id=launch, owner="t", job_id=job.id, instance_id=launch[:3],
                state=InstanceState.RUNNING, price_hr=0.40, actual_price_hr=actual))
    report = app_status.status(store)
    doc = report.to_json()
    by = {i["job"]: i for i in doc["instances"]}
    assert (by["a"]["price_hr"], by["a"]["actual_price_hr"], by["a"]["charged_price_hr"]) == (0.40, 0.4171, 0.4171)
    assert (by["b"]["price_hr"], by["b"]["actual_price_hr"], by["b"]["charged_price_hr"]) == (0.40, None, 0.40)
    assert doc["totals"]["burn_usd_per_hour"] == pytest.approx(0.8171)
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert jobs["a"]["burn_usd_per_hour"] == pytest.approx(0.4171)
    with store.transaction() as tx:                              # a later update without a price keeps it
        repo.record_instance(tx, repo.InstanceRecord(provider="vastai", launch_id="la00000000001", owner="t",
                                                     state=InstanceState.RUNNING))
    assert {i.job: i.actual_price_hr for i in app_status.status(store).instances}["a"] == 0.4171


def test_status_table_prints_quoted_and_actual(tmp_path: Path, store: Store) -> None:
    import contextlib
    import io

    from orchestrator.cli.jobs import _print_status

    app_jobs.apply(store, manifests(tmp_path, "a", "b"))
    with store.transaction() as tx:
        job = repo.require_job(tx, "a")
        repo.create_attempt(tx, job.id, "la00000000001")
        repo.record_instance(tx, repo.InstanceRecord(provider="runpod", launch_id="la00000000001", owner="t",
                                                     job_id=job.id, instance_id="pod1", state=InstanceState.RUNNING,
                                                     price_hr=1.39, actual_price_hr=1.44))
        repo.record_event(tx, EventKind.LAUNCHED, "runpod pod1 (" + "a very long reason " * 10 + ")", job_id=job.id)
        other = repo.require_job(tx, "b")
        repo.create_attempt(tx, other.id, "lb00000000001")
        repo.record_instance(tx, repo.InstanceRecord(provider="vastai", launch_id="lb00000000001", owner="t",
                                                     job_id=other.id, instance_id="i-0123456789abcdef0123",
                                                     state=InstanceState.UNREACHABLE,
                                                     region="a-region-with-a-long-name", market=Market.SPOT,
                                                     price_hr=0.4))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _print_status(app_status.status(store))
    text = out.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    header = next(line for line in lines if "QUOTED" in line)
    assert header.split() == ["PROVIDER", "INSTANCE", "STATE", "QUOTED", "ACTUAL", "JOB"]
    pod = next(line for line in lines if line.startswith("  runpod"))
    assert pod.split() == ["runpod", "pod1", "running", "$1.39", "$1.44", "a"]
    # no reported price: "-"; an unreachable machine still burns (its quoted price counts in the total)
    vast = next(line for line in lines if line.startswith("  vastai"))
    assert vast.split()[2:] == ["unreachable", "$0.40", "-", "b"] and "~" in vast.split()[1]
    assert header.index("ACTUAL") + len("ACTUAL") == pod.index("$1.44") + len("$1.44")
    assert "burning $1.84/h" in text
    job_line = next(line for line in lines if line.startswith("a "))
    assert job_line.split()[:2] == ["a", "pending"] and "$1.44" in job_line
