"""``orch status``'s total spend is the bill: the jobs deleted (``orch down``, ``apply --prune``) are no longer
listed, but their hours were paid, so the total counts them and says how much of it is theirs."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.app import jobs as app_jobs
from orchestrator.app import status as app_status
from orchestrator.engine.states import DesiredState
from orchestrator.store import Store, repo
from tests._store_db import BACKENDS, open_test_store
from tests.test_jobs_service import manifests

T0 = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from open_test_store(request.param, tmp_path)


def _spend(store: Store, spent: dict[str, float], deleted: tuple[str, ...]) -> None:
    with store.transaction() as tx:
        for name, usd in spent.items():
            repo.record_spend(tx, repo.require_job(tx, name).id, T0, T0 + timedelta(hours=1), usd)
        for name in deleted:
            repo.set_desired_state(tx, name, DesiredState.DELETED, now=T0)


def _text(report: app_status.StatusReport) -> str:
    from orchestrator.cli.jobs import _print_status

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _print_status(report)
    return out.getvalue()


def test_the_total_counts_what_deleted_jobs_spent(tmp_path: Path, store: Store) -> None:
    app_jobs.apply(store, manifests(tmp_path, "kept", "gone"))
    _spend(store, {"kept": 3.0, "gone": 5.5}, deleted=("gone",))
    report = app_status.status(store)
    assert [j.name for j in report.jobs] == ["kept"]              # a deleted job with no machine is not listed
    totals = report.to_json()["totals"]
    assert totals["spent_usd"] == pytest.approx(8.5)             # ... but its money was paid
    assert totals["jobs_spent_usd"] == pytest.approx(3.0)
    assert totals["deleted_spent_usd"] == pytest.approx(5.5)
    text = _text(report)
    assert text.splitlines()[-1] == "total: 0 live instances, burning $0.00/h, spent $8.50 (deleted jobs: $5.50)"
    one = app_status.status(store, "kept")                       # one job's report: that job's money only
    assert one.spent_usd == pytest.approx(3.0) and one.deleted_spent_usd == 0.0
    assert _text(one).splitlines()[-1] == "total: 0 live instances, burning $0.00/h, spent $3.00"


def test_no_deleted_spend_keeps_the_short_total_and_a_big_one_wraps_within_80_columns(
        tmp_path: Path, store: Store) -> None:
    app_jobs.apply(store, manifests(tmp_path, "kept", "gone"))
    _spend(store, {"kept": 2.0}, deleted=("gone",))              # deleted, but it never spent: nothing to say
    assert _text(app_status.status(store)).splitlines()[-1] == "total: 0 live instances, burning $0.00/h, spent $2.00"
    _spend(store, {"kept": 1_234_000.0, "gone": 9_876_543.21}, deleted=())
    lines = _text(app_status.status(store)).splitlines()
    assert max(map(len, lines)) <= 80, lines
    total = " ".join(line.strip() for line in lines[lines.index("") + 1:])
    assert total == "total: 0 live instances, burning $0.00/h, spent $11,110,545.21 (deleted jobs: $9,876,543.21)"
