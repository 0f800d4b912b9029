"""orchestrator.app.jobs without the CLI: planning, apply, daemon detection, down and event following."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.app import down as app_down
from orchestrator.app import errors as app_errors
from orchestrator.app import jobs as app_jobs
from orchestrator.app import launching as app_launching
from orchestrator.app import plan as app_plan
from orchestrator.app import status as app_status
from orchestrator.engine.events import EventKind
from orchestrator.engine.states import AttemptState, DesiredState
from orchestrator.store import Store, repo
from providers.base import InstanceState
from tests._store_db import BACKENDS, open_test_store

MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: {name}
resources: {{gpu: A100-80G, count: 8}}
market: on-demand
run: {{launcher: command, command: train}}
policies: {{estimated_hours: 3}}
"""


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from open_test_store(request.param, tmp_path)


def manifests(tmp_path: Path, *names: str) -> list:
    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    for n in names:
        (d / f"{n}.yaml").write_text(MANIFEST.format(name=n))
    return app_jobs.load([d / f"{n}.yaml" for n in names])


def test_plan_restricted_to_configured_providers(tmp_path: Path) -> None:
    from orchestrator.offers.sources import offer_sources
    from providers.catalog import load_catalog

    loaded = manifests(tmp_path, "p")
    catalog = load_catalog().offers
    [everything] = app_plan.plan_jobs(loaded, offer_sources(catalog), alternatives=3)
    assert everything.plan.chosen is not None and len(everything.options) == 4
    providers = {p.offer.provider for p in everything.plan.eligible}
    keep = sorted(providers)[:1]
    [only] = app_plan.plan_jobs(loaded, offer_sources(catalog), only_providers=keep)
    assert only.plan.eligible and {p.offer.provider for p in only.plan.eligible} == set(keep)
    assert only.to_json()["chosen"]["estimated_total_usd"] == pytest.approx(
        only.plan.chosen.total_price_hr * 3, abs=0.01)
    with pytest.raises(app_errors.BadInputError):
        app_plan.plan_jobs(loaded, offer_sources(catalog), alternatives=-1)


def test_apply_is_one_transaction(tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    result = app_jobs.apply(store, manifests(tmp_path, "a", "b"))
    assert result.created == ("a", "b")
    assert app_jobs.apply(store, manifests(tmp_path, "a", "b")).unchanged == ("a", "b")

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(repo, "record_event", boom)
    with pytest.raises(RuntimeError):
        app_jobs.apply(store, manifests(tmp_path, "a", "c"), prune=True)
    monkeypatch.undo()
    report = app_status.status(store)
    assert {(j.name, j.desired_state) for j in report.jobs} == {("a", DesiredState.ACTIVE), ("b", DesiredState.ACTIVE)}


def test_daemon_detection(tmp_path: Path, store: Store) -> None:
    from orchestrator.store.fleet import take_share
    from orchestrator.store.leases import daemon_lock, lock_path

    assert app_launching.daemon_running(store) is False
    if lock_path(store) is not None:
        with daemon_lock(store):
            assert app_launching.daemon_running(store) is True
    else:
        app_jobs.apply(store, manifests(tmp_path, "leased"))
        now = datetime.now(UTC)
        with store.transaction() as tx:
            take_share(tx, "daemon-1", None, ttl=timedelta(seconds=90), now=now)
        assert app_launching.daemon_running(store, now=now) is True
        assert app_launching.daemon_running(store, now=now + timedelta(hours=1)) is False   # its registration lapsed
    assert app_launching.daemon_running(store) is (lock_path(store) is None)


def test_status_json_money_is_always_a_float(tmp_path: Path, store: Store) -> None:
    """With nothing burning, `burn_usd_per_hour` was the integer 0 (an empty sum) beside `spent_usd` 0.0: a typed
    reader of --json (a float field) met an int only when the fleet was idle."""
    totals = app_status.status(store).to_json()["totals"]
    assert totals == {"burn_usd_per_hour": 0.0, "spent_usd": 0.0, "jobs_spent_usd": 0.0, "deleted_spent_usd": 0.0,
                      "jobs": 0, "live_instances": 0}
    assert all(type(totals[k]) is float for k in ("burn_usd_per_hour", "spent_usd", "jobs_spent_usd",
                                                  "deleted_spent_usd"))
    app_jobs.apply(store, manifests(tmp_path, "idle"))
    doc = app_status.status(store).to_json()
    money = [doc["totals"]["burn_usd_per_hour"], doc["totals"]["spent_usd"],
             doc["jobs"][0]["burn_usd_per_hour"], doc["jobs"][0]["spent_usd"]]
    assert all(type(v) is float for v in money), money


def test_mark_down(tmp_path: Path, store: Store) -> None:
    app_jobs.apply(store, manifests(tmp_path, "x", "y"))
    with pytest.raises(app_errors.JobsError, match="nope"):
        app_down.mark_down(store, ["x", "nope"])
    assert {j.desired_state for j in app_status.status(store).jobs} == {DesiredState.ACTIVE}   # nothing half-done
    assert app_down.mark_down(store, ["x"]) == ["x"]
    assert [j.name for j in app_status.status(store).jobs] == ["y"]
    assert app_down.mark_down(store, everything=True) == ["y"]
    assert app_status.status(store).jobs == ()


class _StuckEngine:
    """An engine whose cloud never confirms: wait_down must give up at its deadline."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.ticks = 0
        from contextlib import nullcontext

        self.lock = nullcontext()

    def tick(self):  # type: ignore[no-untyped-def]
        from orchestrator.engine.tick import TickReport

        self.ticks += 1
        return TickReport(errors=["terminate: still there"])


def _down_with_a_running_machine(tmp_path: Path, store: Store, name: str, launch_id: str, instance_id: str) -> None:
    """Job ``name`` applied, one attempt with a running $1/h Vast machine, then marked down."""
    app_jobs.apply(store, manifests(tmp_path, name))
    with store.transaction() as tx:
        job = repo.require_job(tx, name)
        repo.create_attempt(tx, job.id, launch_id)
        repo.record_instance(tx, repo.InstanceRecord(provider="vastai", launch_id=launch_id, owner="t",
                                                     job_id=job.id, instance_id=instance_id,
                                                     state=InstanceState.RUNNING, price_hr=1.0))
    app_down.mark_down(store, [name])


def test_wait_down_gives_up_at_the_deadline(tmp_path: Path, store: Store) -> None:
    _down_with_a_running_machine(tmp_path, store, "stuck", "lstuck0000001", "42")
    clock = [0.0]
    engine = _StuckEngine(store)
    said: list[str] = []
    outcome = app_down.wait_down(engine, store, ["stuck"], timeout_s=10, poll_s=1,  # type: ignore[arg-type]
                           monotonic=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s),
                           on_error=said.append)
    assert not outcome.confirmed and [i.instance_id for i in outcome.remaining] == ["42"]
    assert outcome.timed_out and outcome.waited_s == 10
    # The same error on each of the 11 ticks is one error, said when first met.
    assert engine.ticks == 11 and outcome.errors == said == ["terminate: still there"]
    with store.transaction() as tx:
        repo.transition_attempt(tx, repo.get_attempt_by_launch_id(tx, "lstuck0000001"),
                                AttemptState.TERMINATED)
        repo.mark_instance_gone(tx, "lstuck0000001")
    assert app_down.wait_down(engine, store, ["stuck"], timeout_s=10, poll_s=1,  # type: ignore[arg-type]
                        monotonic=lambda: clock[0], sleep=lambda s: None).confirmed


def test_wait_down_says_at_once_when_no_configured_provider_can_end_a_machine(tmp_path: Path, store: Store) -> None:
    """A machine on a provider since removed from orch's config: the engine skips that cloud silently, so
    waiting out the timeout could never confirm it. It is said at once, naming the fix, and the wait ends."""
    app_jobs.apply(store, manifests(tmp_path, "gone", "kept"))
    with store.transaction() as tx:
        for name, provider, launch in (("gone", "lambda", "lgone00000001"), ("kept", "vastai", "lkept00000001")):
            job = repo.require_job(tx, name)
            repo.create_attempt(tx, job.id, launch)
            repo.record_instance(tx, repo.InstanceRecord(provider=provider, launch_id=launch, owner="t",
                                                         job_id=job.id, instance_id=f"i-{name}",
                                                         state=InstanceState.RUNNING, price_hr=1.0))
    app_down.mark_down(store, ["gone", "kept"])
    clock = [0.0]
    engine = _StuckEngine(store)
    said: list[str] = []

    def wait(jobs: list[str]) -> app_down.DownOutcome:
        return app_down.wait_down(engine, store, jobs, timeout_s=10, poll_s=1,  # type: ignore[arg-type]
                                  monotonic=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s),
                                  on_error=said.append, configured={"vastai"})

    outcome = wait(["gone"])
    assert engine.ticks == 1 and not outcome.confirmed and not outcome.timed_out
    assert [i.instance_id for i in outcome.remaining] == ["i-gone"]
    [error] = [e for e in outcome.errors if e.startswith("lambda ")]
    assert "i-gone" in error and "not configured" in error and "providers.lambda" in error and error in said
    # With a machine the configured providers may still end, it waits for it, to the deadline.
    engine.ticks, clock[0] = 0, 0.0
    outcome = wait(["gone", "kept"])
    assert engine.ticks == 11 and outcome.timed_out
    assert sorted(i.instance_id or "" for i in outcome.remaining) == ["i-gone", "i-kept"]


def test_a_wait_whose_ticks_are_slow_says_how_long_it_took_not_the_timeout(tmp_path: Path, store: Store) -> None:
    """A cloud that does not answer is retried inside a tick: `orch down --timeout 10` took 37 s and said
    "not confirmed gone after 10s"."""
    from orchestrator.cli.down import not_confirmed

    _down_with_a_running_machine(tmp_path, store, "slow", "lslow00000001", "7")
    clock = [0.0]
    engine = _StuckEngine(store)
    real_tick = engine.tick

    def slow_tick():  # type: ignore[no-untyped-def]
        clock[0] += 18.5          # the cloud's retries
        return real_tick()

    engine.tick = slow_tick  # type: ignore[method-assign]
    outcome = app_down.wait_down(engine, store, ["slow"], timeout_s=10, poll_s=1,  # type: ignore[arg-type]
                                 monotonic=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    assert outcome.timed_out and outcome.waited_s == 18.5 and engine.ticks == 1
    assert not_confirmed(outcome, 10) == ("error: 1 machine not confirmed gone after 18s (--timeout 10: the clouds' "
                                          "answers took longer):")
    outcome.waited_s = 10.2
    assert not_confirmed(outcome, 10) == "error: 1 machine not confirmed gone after 10s:"


def test_follow_yields_new_events_and_stops_after_max_wait(tmp_path: Path, store: Store) -> None:
    app_jobs.apply(store, manifests(tmp_path, "f"))
    past = app_status.events(store, "f")
    assert [e.kind for e in past] == ["job.created"]
    clock = [0.0]
    appended = []

    def sleep(s: float) -> None:
        clock[0] += s
        if not appended:
            with store.transaction() as tx:
                repo.record_event(tx, EventKind.APPLY, "later", job_id=repo.require_job(tx, "f").id)
            appended.append(1)

    seen = list(app_status.follow(store, "f", after_id=past[-1].id, poll_s=1, max_wait_s=5,
                          monotonic=lambda: clock[0], sleep=sleep))
    assert [(e.kind, e.message) for e in seen] == [(EventKind.APPLY, "later")]
    assert 5 <= clock[0] <= 7
    with pytest.raises(app_errors.JobsError):
        app_status.events(store, "ghost")


def test_ssh_public_key_sources(tmp_path: Path) -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK test"
    assert app_launching.ssh_public_key({app_launching.SSH_KEY_ENV: key}) == key
    pub = tmp_path / "k.pub"
    pub.write_text(key + "\n")
    assert app_launching.ssh_public_key({app_launching.SSH_KEY_ENV: str(pub)}) == key
    with pytest.raises(ValueError, match="neither a public key nor a readable file"):   # never the path as the key
        app_launching.ssh_public_key({app_launching.SSH_KEY_ENV: str(tmp_path / "missing.pub")})
