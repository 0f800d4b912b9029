"""Every path that launches is fenced (issue 28, item 2): ``orch apply --launch`` racing starting daemons on
PostgreSQL takes the daemons' lease discipline, so each job is launched once whoever races.

Each trial: three daemons (lease owners of their own) and two one-shot apply engines (``build_engine``, what
``orch apply --launch`` runs) tick at once, in threads, over one PostgreSQL database, against the Lambda wire
fake, for jobs recorded just before. Before the fix the apply engines had no lease owner and launched every
pending job whatever the daemons held. Runs where ORCH_TEST_DATABASE_URL is set.

10 trials (20 jobs): with the apply engines given no lease owner again, 5 runs of 5 failed, 14 to 20 of the 20
jobs launched twice each time (50 trials were 2.9 s each, the longest PostgreSQL test).
"""

from __future__ import annotations

import functools
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from orchestrator.app.launching import build_engine, launch_pending
from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import AUTO, Service
from orchestrator.store import open_store
from orchestrator.store.models import Attempt, Job
from tests.daemon_world import CATALOG, OWNER, PUBLIC_KEY, Clock, Fakes, add_job, service_for
from tests.support.together import run_together

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
TRIALS = 10
JOBS_PER_TRIAL = 2


def _race(daemons: list[Service], fakes: Fakes, url: str, clock: Clock) -> list[BaseException]:
    """The three daemons tick and two `orch apply --launch` engines run, all started by one barrier."""
    applies = [open_store(url) for _ in range(2)]
    engines = [build_engine(s, OrchConfig(owner=OWNER), fakes.build_providers(), CATALOG, use_live_offers=False,
                            clock=clock) for s in applies]
    calls = [d.reconciler.tick for d in daemons] + [
        functools.partial(launch_pending, e, max_ticks=2) for e in engines]   # type: ignore[arg-type]
    errors = list(run_together(calls).values())
    for s in applies:
        s.close()
    return errors


def test_apply_launch_racing_daemons_launches_each_job_once(pg_url: str, fakes: Fakes,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_SSH_PUBLIC_KEY", PUBLIC_KEY)
    clock = Clock()
    daemons = [service_for(fakes, pg_url, clock=clock, lease_owner=AUTO) for _ in range(3)]
    admin = open_store(pg_url)
    try:
        for d in daemons:
            d.engine_store.join(clock())      # type: ignore[attr-defined]
        errors: list[BaseException] = []
        for trial in range(TRIALS):
            for n in range(JOBS_PER_TRIAL):
                add_job(admin, f"t{trial}-j{n}", now=clock(), providers=["lambda"])
            clock.advance(seconds=10)
            errors += _race(daemons, fakes, pg_url, clock)
        with admin.transaction() as tx:
            names = {j.id: j.name for j in tx.exec(select(Job))}
            launches = Counter(names[a.job_id] for a in tx.exec(select(Attempt)))
        twice = sorted(name for name, n in launches.items() if n > 1)
        assert twice == [], f"{len(twice)} of {len(names)} jobs launched more than once: {twice[:10]}"
        assert not errors, errors[:5]
        with admin.transaction() as tx:
            planned = sorted(a.launch_id for a in tx.exec(select(Attempt)))
        cloud = sorted(str(i.launch_id) for i in fakes.live_instances()["lambda"])
        assert cloud == planned          # one machine per launch id, none unaccounted for
    finally:
        for d in daemons:
            d.close()
        admin.close()


def test_a_second_apply_launch_is_told_another_command_holds_the_store_not_a_daemon(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While one `orch apply --launch` is driving (its engine registered in the fleet), a second one is refused
    with the true reason (another command), and nothing is recorded; once the first has left, or where a real
    daemon is registered, the second hears that instead."""
    from typer.testing import CliRunner

    from orchestrator.cli.main import app
    from orchestrator.store.fleet import heartbeat

    (tmp_path / "config.yaml").write_text("owner: tester\n")
    for k, v in {"ORCH_CONFIG": str(tmp_path / "config.yaml"), "ORCH_DATABASE_URL": pg_url,
                 "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("ORCH_SSH_PUBLIC_KEY", PUBLIC_KEY)
    job = tmp_path / "j.yaml"
    job.write_text("apiVersion: orch/v1\nkind: Job\nname: j\nresources: {gpu: RTX4090, count: 1}\n"
                   "run: {launcher: command, command: x}\n")

    def apply(*extra: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, ["apply", str(job), "--yes", *extra], catch_exceptions=False)
        return result.exit_code, result.stdout + result.stderr

    store = open_store(pg_url)
    try:
        first = build_engine(store, OrchConfig(owner=OWNER), {}, CATALOG, use_live_offers=False)
        with first.lock:                     # the first command's engine is in the fleet
            for extra in (("--launch",), ()):
                code, said = apply(*extra)
                assert code == 1, said
                assert "another `orch apply --launch` or `orch down` is driving this store" in said
                assert "daemon" not in said and str(first.lease_owner) in said
            with store.transaction() as tx:
                assert list(tx.exec(select(Job))) == []          # nothing recorded
        with store.transaction() as tx:      # a daemon now: the message says so
            from orchestrator.clock import utcnow

            heartbeat(tx, "host-1-abc", None, ttl=timedelta(minutes=5), now=utcnow())
        code, said = apply("--launch")
        assert code == 1 and "a daemon is running on this store" in said
    finally:
        store.close()
