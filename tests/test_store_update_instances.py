"""``repo.update_instances`` writes what ``repo.record_instance`` would, row for row (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlmodel import col, select

from orchestrator.store import repo
from orchestrator.store.db import Store
from orchestrator.store.models import InstanceRow
from providers.base import InstanceState, Market
from tests._store_db import BACKENDS, open_test_store

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=1)
UPDATES = [
    repo.InstanceRecord(provider="lambda", launch_id="0", owner="o", instance_id="i0", state=InstanceState.RUNNING,
                        raw_state="active", public_ip="198.51.100.1", actual_price_hr=1.29),
    repo.InstanceRecord(provider="lambda", launch_id="1", owner="o", instance_id="i1", state=InstanceState.TERMINATED,
                        raw_state="terminated"),                        # gone: terminated_at is stamped
    repo.InstanceRecord(provider="lambda", launch_id="2", owner="o", instance_id="i2", state=InstanceState.RUNNING,
                        host_keys=("ssh-ed25519 AAAA",)),              # host keys: the typed statement
    repo.InstanceRecord(provider="lambda", launch_id="3", owner="o", instance_id='i"3\\', state=InstanceState.RUNNING,
                        raw_state='say "hi", {a} \\ b', actual_price_hr=0.1 + 0.2),   # quoted, exact
]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from open_test_store(request.param, tmp_path)


def _written(store: Store, prefix: str, *, many: bool) -> list[tuple[object, ...]]:
    with store.transaction() as tx:
        for i in range(4):
            repo.record_instance(tx, repo.InstanceRecord(provider="lambda", launch_id=f"{prefix}{i}", owner="o",
                                                         instance_type="gpu_1x", state=InstanceState.PENDING,
                                                         price_hr=1.0),
                                 now=T0)
    updates = [replace(u, launch_id=prefix + u.launch_id) for u in UPDATES]
    with store.transaction() as tx:
        if many:
            repo.update_instances(tx, updates, now=LATER)
        else:
            for rec in updates:
                repo.record_instance(tx, rec, now=LATER)
    with store.transaction() as tx:
        found = tx.exec(select(InstanceRow).where(col(InstanceRow.launch_id).startswith(prefix))
                        .order_by(col(InstanceRow.launch_id))).all()
        return [(r.launch_id[len(prefix):], r.instance_id, r.state, r.raw_state, r.public_ip, r.actual_price_hr,
                 r.price_hr, r.host_keys, r.updated_at, r.terminated_at) for r in found]


def test_many_rows_updated_at_once_are_as_each_recorded(store: Store) -> None:
    many = _written(store, "m", many=True)
    assert many == _written(store, "r", many=False)
    by_id = {r[0]: r for r in many}
    assert by_id["0"][1:] == ("i0", "running", "active", "198.51.100.1", 1.29, 1.0, [], LATER, None)
    assert by_id["1"][2] == "terminated" and by_id["1"][9] == LATER
    assert by_id["2"][7] == ["ssh-ed25519 AAAA"] and by_id["3"][1:6] == ('i"3\\', "running", 'say "hi", {a} \\ b',
                                                                          None, 0.1 + 0.2)


@pytest.mark.parametrize("odd", ['plain', 'say "hi", {a} \\ b', "NULL", "", "sep\x1fin it"])
def test_a_column_written_whole_reads_back_as_each_row_recorded(store: Store, odd: str) -> None:
    # PostgreSQL writes a column of text (or of numbers) alone as one joined array literal: quotes,
    # backslashes, braces, commas, "NULL" and the joiner's own separator must read back as given.
    def rows(prefix: str) -> list[repo.InstanceRecord]:
        return [repo.InstanceRecord(provider="lambda", launch_id=f"{prefix}{i}", owner="o", instance_id=f"i{i}",
                                    state=InstanceState.RUNNING, raw_state=odd if i % 2 else f"active {i}",
                                    public_ip=f"198.51.100.{i}", actual_price_hr=[1.29, 0.1 + 0.2, 3][i % 3])
                for i in range(6)]

    def written(prefix: str, many: bool) -> list[tuple[object, ...]]:
        with store.transaction() as tx:
            for rec in rows(prefix):
                repo.record_instance(tx, replace(rec, state=InstanceState.PENDING, raw_state=None, public_ip=None,
                                                 actual_price_hr=None, instance_id=None), now=T0)
        with store.transaction() as tx:
            if many:
                repo.update_instances(tx, rows(prefix), now=LATER)
            else:
                for rec in rows(prefix):
                    repo.record_instance(tx, rec, now=LATER)
        with store.transaction() as tx:
            found = tx.exec(select(InstanceRow).where(col(InstanceRow.launch_id).startswith(prefix))
                            .order_by(col(InstanceRow.launch_id))).all()
            return [(r.launch_id[len(prefix):], r.instance_id, r.state, r.raw_state, r.public_ip, r.actual_price_hr)
                    for r in found]

    many = written("m", True)
    assert many == written("r", False)
    assert [r[3] for r in many] == [odd if i % 2 else f"active {i}" for i in range(6)]


def test_the_array_literal_of_a_column_is_the_one_built_value_by_value() -> None:
    from orchestrator.store.pg_arrays import pg_array_literal

    def slow(values: list[object]) -> str:
        def one(v: object) -> str:
            if v is None:
                return "NULL"
            if isinstance(v, str):
                return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
            return repr(v)
        return "{" + ",".join(map(one, values)) + "}"

    for values in (["a", 'b"c', "d\\e", "", "{x,y}"], ["a\x1fb", "c"], [1, 2.5, 0.1 + 0.2], [1.0, None],
                   ["a", None], [], [True, 1], ["x"]):
        assert pg_array_literal(values) == slow(values), values    # type: ignore[arg-type]


def test_a_typed_state_and_market_are_stored_as_their_text_and_typed_again_where_read(store: Store) -> None:
    # The record carries members, the table holds their text (both statements of update_instances: the plain
    # one and the typed one that host keys take), and the row's accessors give the members back.
    def rec(launch_id: str, **fields: object) -> repo.InstanceRecord:
        return repo.InstanceRecord(provider="vastai", launch_id=launch_id, owner="o", **fields)  # type: ignore[arg-type]

    with store.transaction() as tx:
        row = repo.record_instance(tx, rec("t0", state=InstanceState.PENDING, market=Market.SPOT), now=T0)
        assert (type(row.state), type(row.market)) == (str, str), "the row holds text, not the member"
        repo.record_instance(tx, rec("t1", state=InstanceState.PENDING, market=Market.ON_DEMAND), now=T0)
    with store.transaction() as tx:
        repo.update_instances(tx, [rec("t0", state=InstanceState.UNREACHABLE),
                                   rec("t1", state=InstanceState.PREEMPTED, host_keys=("ssh-ed25519 AAAA",))],
                              now=LATER)
    with store.transaction() as tx:
        t0, t1 = repo.list_instances(tx, provider="vastai")
        assert (t0.state, t0.market, t1.state, t1.market) == ("unreachable", "spot", "preempted", "on-demand")
        assert (t0.typed_state, t0.typed_market) == (InstanceState.UNREACHABLE, Market.SPOT)
        assert (t1.typed_state, t1.typed_market) == (InstanceState.PREEMPTED, Market.ON_DEMAND)
        assert (t0.terminated_at, t1.terminated_at) == (None, LATER), "a gone member stamps the end as its text did"


def test_a_record_refuses_a_state_or_market_given_as_text() -> None:
    with pytest.raises(TypeError, match="state must be an InstanceState, not 'running'"):
        repo.InstanceRecord(provider="vastai", launch_id="l", owner="o", state="running")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="market must be a Market, not 'spot'"):
        repo.InstanceRecord(provider="vastai", launch_id="l", owner="o", market="spot")  # type: ignore[arg-type]


def test_stored_text_that_names_no_member_reads_as_text_and_is_refused_where_it_is_typed(store: Store) -> None:
    # Text written by hand (or by another version): the row reads as it did, a live one since it names no
    # gone state; typing it is a ValueError, as InstanceState(row.state) was where the readers typed it.
    with store.transaction() as tx:
        repo.record_instance(tx, repo.InstanceRecord(provider="vastai", launch_id="b0", owner="o",
                                                     state=InstanceState.RUNNING, market=Market.SPOT), now=T0)
        tx.connection().execute(update(InstanceRow).where(col(InstanceRow.launch_id) == "b0")
                                .values(state="runing", market="Spot"))
    with store.transaction() as tx:
        [row] = repo.list_instances(tx, live_only=True)
        assert (row.state, row.market) == ("runing", "Spot")
        with pytest.raises(ValueError, match="'runing' is not a valid InstanceState"):
            _ = row.typed_state
        with pytest.raises(ValueError, match="'Spot' is not a valid Market"):
            _ = row.typed_market
        repo.record_instance(tx, repo.InstanceRecord(provider="vastai", launch_id="b0", owner="o",
                                                     state=InstanceState.STOPPED), now=LATER)
    with store.transaction() as tx:
        [row] = repo.list_instances(tx)
        assert (row.typed_state, row.market) == (InstanceState.STOPPED, "Spot"), "a record rewrites what it gives"
