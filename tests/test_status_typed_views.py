"""``orch status``/``orch events``/``orch down``'s views carry typed values read from the store (a machine's
state and market, an event's kind), while their JSON keeps the stored text: a state the store holds is read as
its member, and text that names none is refused where the row is read, never carried on as a string."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.app import jobs as app_jobs
from orchestrator.app import status as app_status
from orchestrator.app.down import live_machines
from orchestrator.engine.events import EventKind
from orchestrator.engine.states import AttemptState
from orchestrator.store import Store, repo
from orchestrator.store.models import Event, InstanceRow
from providers.base import InstanceState, Market
from tests._store_db import BACKENDS, open_test_store
from tests.test_jobs_service import manifests


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from open_test_store(request.param, tmp_path)


def test_status_views_are_typed_and_their_json_is_the_stored_text(tmp_path: Path, store: Store) -> None:
    app_jobs.apply(store, manifests(tmp_path, "a"))
    with store.transaction() as tx:
        job = repo.require_job(tx, "a")
        repo.create_attempt(tx, job.id, "la00000000001")
        repo.record_instance(tx, repo.InstanceRecord(
            provider="vastai", launch_id="la00000000001", owner="t", job_id=job.id, instance_id="i1",
            state=InstanceState.UNREACHABLE, market=Market.SPOT, price_hr=0.40))
    report = app_status.status(store)
    [machine] = report.instances
    assert machine.state is InstanceState.UNREACHABLE and machine.market is Market.SPOT
    assert machine.burning, "an unreachable machine is still the cloud's, and still billed"
    doc = report.to_json()
    assert (doc["instances"][0]["state"], doc["instances"][0]["market"]) == ("unreachable", "spot")
    assert doc["jobs"][0]["market"] == "spot"
    assert all(type(e.kind) is EventKind for e in app_status.events(store, "a"))
    assert app_status.events(store, "a")[0].to_json()["kind"] == "job.created"


def test_down_lists_a_live_attempt_without_a_machine_row_by_its_attempt_state(tmp_path: Path,
                                                                               store: Store) -> None:
    app_jobs.apply(store, manifests(tmp_path, "a"))
    with store.transaction() as tx:
        repo.create_attempt(tx, repo.require_job(tx, "a").id, "la00000000002")   # planned: no machine row
    [view] = live_machines(store, ["a"])
    assert (view.state, view.market, view.attempt_state) == (None, None, AttemptState.PLANNED)
    assert not view.burning
    assert (view.to_json()["state"], view.to_json()["market"]) == ("planned", "")


def _row(**changes: object) -> InstanceRow:
    values: dict[str, object] = {"provider": "aws", "launch_id": "l1", "owner": "t", "instance_type": "g5.xlarge",
                                 "region": "us-east-1", "market": "on-demand", "state": "running", "price_hr": 1.0}
    values.update(changes)
    return InstanceRow(**values)


def test_a_stored_state_or_market_that_names_no_member_is_refused_where_the_row_is_read() -> None:
    assert app_status.instance_view(_row(), {}).state is InstanceState.RUNNING
    with pytest.raises(ValueError, match="'runing' is not a valid InstanceState"):
        app_status.instance_view(_row(state="runing"), {})
    with pytest.raises(ValueError, match="'Spot' is not a valid Market"):
        app_status.instance_view(_row(market="Spot"), {})


def test_a_stored_event_kind_that_names_no_member_is_refused_where_the_row_is_read() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    assert app_status._event_view(Event(id=1, ts=now, kind="no-offer", message="m"), {}).kind is EventKind.NO_OFFER
    with pytest.raises(ValueError, match="'no_offer' is not a valid EventKind"):
        app_status._event_view(Event(id=1, ts=now, kind="no_offer", message="m"), {})


def test_the_consoles_rows_are_typed_where_read_and_refuse_text_that_names_no_member() -> None:
    from orchestrator.store import console_queries

    node = console_queries._node(_row(state="unreachable", market="spot"), None, {})
    assert (node.state, node.market) == (InstanceState.UNREACHABLE, Market.SPOT)
    # The console's fleet and `orch status` burn on one definition: an unreachable machine still bills.
    assert node.burning and app_status.instance_view(_row(state="unreachable"), {}).burning
    assert not console_queries._node(_row(state="stopped"), None, {}).burning
    with pytest.raises(ValueError, match="'gone' is not a valid InstanceState"):
        console_queries._node(_row(state="gone"), None, {})
    now = datetime(2026, 12, 1, tzinfo=UTC)
    assert console_queries._event_row(Event(id=1, ts=now, kind="launched", message="m"), {}).kind \
        is EventKind.LAUNCHED
    with pytest.raises(ValueError, match="is not a valid EventKind"):
        console_queries._event_row(Event(id=1, ts=now, kind="Launched", message="m"), {})
