"""Issue 21's "kill" and "pause" with REAL processes: three daemons, each ``python -m tests.support.fleet_daemon``
(the engine as ``orch daemon`` builds it, on PostgreSQL from ORCH_TEST_DATABASE_URL; skipped without it),
against the Lambda wire fake served from this test process.

Every daemon reads the test's fake clock from one file and ticks only when told (one ``tick`` line on its
stdin, one JSON line back), so a round is: move the clock one step, tell the daemons to tick, read their
answers; they tick at once, each in its own process. Nothing waits on the wall clock: a daemon is held at a
named point of its launch (``orchestrator.engine.crashpoints``' stop mode: it says so on stdout and SIGSTOPs
itself), and the test then SIGKILLs it (dead mid-launch) or lets the clock run past its lease before it
SIGCONTs it (paused mid-launch). The lease period is counted on the fake clock.

Each daemon reaches the fake through its own URL prefix (``/d1/api/v1``), so the cloud's call log says which
daemon asked for what.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from orchestrator.engine.states import JobStatus
from orchestrator.manifest.schema import Manifest
from orchestrator.store import open_store, repo
from orchestrator.store.db import Store
from orchestrator.store.models import Attempt, Job
from providers.base import parse_instance_name
from tests.crash_world import ROOT, write_catalog
from tests.daemon_world import T0, Fakes, check_invariants, manifest_doc, running_fakes
from tests.fakes.lr_base import Reply

pytestmark = pytest.mark.postgres
TTL = timedelta(seconds=60)
STEP = timedelta(seconds=10)
NAMES = ("d1", "d2", "d3")
#: A failure guard only (a daemon that hangs or died fails the test after this long); nothing is timed by it.
READ_TIMEOUT_S = 120
LAUNCH = "/api/v1/instance-operations/launch"
TERMINATE = "/api/v1/instance-operations/terminate"


@dataclass(frozen=True)
class Call:
    daemon: str
    method: str
    path: str
    body: Any
    status: int


class Attributed:
    """The Lambda fake behind per-daemon URL prefixes: ``/<daemon>/api/v1/...`` is served as ``/api/v1/...``
    and logged with the daemon's name (the cloud's call log)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[Call] = []
        self.lock = threading.Lock()

    def __call__(self, method: str, path: str, body: Any, headers: dict[str, str]) -> Reply:
        who, _, rest = path.lstrip("/").partition("/")
        if who in NAMES:
            path = "/" + rest
        else:
            who = "test"
        reply = self.inner(method, path, body, headers)
        with self.lock:
            self.calls.append(Call(who, method, path.split("?", 1)[0], body, reply.status))
        return reply

    def changing(self, since: int = 0) -> list[Call]:
        """Cloud-changing calls (launch, terminate) from call number ``since`` on."""
        with self.lock:
            return [c for c in self.calls[since:] if c.method == "POST" and c.path in (LAUNCH, TERMINATE)]


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[str]
    stderr: Path
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=READ_TIMEOUT_S)
        except queue.Empty:
            pytest.fail(f"{self.name}: no answer in {READ_TIMEOUT_S} s; stderr:\n{self._tail()}")
        if line is None:
            pytest.fail(f"{self.name} exited ({self.proc.poll()}); stderr:\n{self._tail()}")
        return dict(json.loads(line))

    def wait_stopped(self) -> None:
        """Block until the process is stopped by SIGSTOP (it announced it just before stopping itself)."""
        _, status = os.waitpid(self.proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP, status

    def _tail(self) -> str:
        return self.stderr.read_text()[-3000:] if self.stderr.exists() else ""


class ProcessFleet:
    """Three daemon processes on one PostgreSQL database, one fake clock (a file), the attributed fake."""

    def __init__(self, fakes: Fakes, url: str, tmp: Path) -> None:
        self.fakes, self.url, self.tmp = fakes, url, tmp
        self.cloud = Attributed(fakes.lam_server._handle)
        fakes.lam_server._handle = self.cloud
        self.clock_file = tmp / "now.txt"
        self.now = T0
        self._write_clock()
        write_catalog(tmp / "catalog")
        self.daemons: dict[str, Daemon] = {}

    def _write_clock(self) -> None:
        part = self.clock_file.with_suffix(".part")
        part.write_text(self.now.isoformat())
        os.replace(part, self.clock_file)          # a daemon never reads half a time

    def _env(self, name: str) -> dict[str, str]:
        config = self.tmp / f"{name}.yaml"
        config.write_text(self.fakes.config_yaml().replace(
            f"'{self.fakes.lambda_url}'", f"'{self.fakes.lam_server.url}/{name}/api/v1'"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
        env.update(ORCH_CONFIG=str(config), ORCH_DATABASE_URL=self.url, ORCH_CATALOG_DIR=str(self.tmp / "catalog"),
                   ORCH_LEASE_OWNER=name, ORCH_LEASE_TTL_S=str(TTL.total_seconds()), ORCH_ORPHAN_GRACE_S="300",
                   XDG_CACHE_HOME=str(self.tmp / name / "cache"), XDG_DATA_HOME=str(self.tmp / name / "data"),
                   PYTHONPATH=str(ROOT))
        return env

    def start(self) -> None:
        for name in NAMES:
            err = self.tmp / f"{name}.stderr"
            proc = subprocess.Popen([sys.executable, "-m", "tests.support.fleet_daemon", "--clock",
                                     str(self.clock_file)], cwd=ROOT, env=self._env(name), text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err.open("w"))
            daemon = Daemon(name, proc, err)
            threading.Thread(target=_pump, args=(proc, daemon.lines), daemon=True).start()
            self.daemons[name] = daemon
        for daemon in self.daemons.values():       # all joined before anyone claims: even shares
            assert daemon.read()["ready"].startswith(f"{daemon.name}-")

    def round(self, names: tuple[str, ...] = NAMES) -> dict[str, dict[str, Any]]:
        """Move the clock one step; the named daemons tick at once. Returns each one's answer."""
        self.now += STEP
        self._write_clock()
        for name in names:
            self.daemons[name].send("tick")
        return {name: self.daemons[name].read() for name in names}

    def arm(self, name: str, point: str, skip: int) -> None:
        self.daemons[name].send(f"arm {point} stop {skip}")
        assert self.daemons[name].read() == {"armed": point}

    def close(self) -> None:
        for daemon in self.daemons.values():
            if daemon.proc.poll() is None:
                daemon.proc.send_signal(signal.SIGCONT)
                daemon.proc.kill()
            daemon.proc.wait(timeout=READ_TIMEOUT_S)
            for pipe in (daemon.proc.stdin, daemon.proc.stdout):
                if pipe is not None:
                    pipe.close()


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            lines.put(line)
    lines.put(None)


@pytest.fixture
def fleet(pg_url: str, tmp_path: Path) -> Iterator[ProcessFleet]:
    with running_fakes() as fakes:
        world = ProcessFleet(fakes, pg_url, tmp_path)
        try:
            yield world
        finally:
            world.close()


# -- what the store and the cloud say ------------------------------------------------------------------

def add_jobs(store: Store, names: list[str], now: datetime) -> None:
    """Lambda-only jobs (as daemon_world.add_job makes them), applied in one transaction."""
    applied = [repo.AppliedJob(m, "h-" + m.name) for m in
               (Manifest.model_validate(manifest_doc(name, providers=["lambda"])) for name in names)]
    with store.transaction() as tx:
        repo.apply_jobs(tx, applied, now=now)


def owners(store: Store) -> dict[int, str | None]:
    """Job id -> the daemon (d1, d2, d3) holding its lease."""
    with store.transaction() as tx:
        return {j.id or 0: (j.lease_owner.split("-", 1)[0] if j.lease_owner else None) for j in tx.exec(select(Job))}


def generations(store: Store) -> dict[int, int]:
    with store.transaction() as tx:
        return {j.id or 0: j.lease_generation for j in tx.exec(select(Job))}


def statuses(store: Store) -> dict[int, tuple[str, str]]:
    with store.transaction() as tx:
        return {j.id or 0: (j.desired_state, j.status) for j in tx.exec(select(Job))}


def job_of_launch(store: Store) -> dict[str, int]:
    with store.transaction() as tx:
        return {a.launch_id: a.job_id for a in tx.exec(select(Attempt))}


def launch_id(call: Call, fakes: Fakes) -> str:
    """The launch id a cloud-changing call was about (a terminate's from its machine's name)."""
    name = call.body["name"] if call.path == LAUNCH else fakes.lam.instances[call.body["instance_ids"][0]].name
    parsed = parse_instance_name(name)
    assert parsed is not None, name
    return parsed[1]


def accepted_launches(fleet: ProcessFleet) -> list[Call]:
    return [c for c in fleet.cloud.changing() if c.path == LAUNCH and c.status == 200]


def settle(fleet: ProcessFleet, admin: Store, names: tuple[str, ...] = NAMES, most: int = 8) -> int:
    """Rounds until every job runs (at most ``most``); every tick must end clean. Returns the rounds."""
    for n in range(1, most + 1):
        for name, doc in fleet.round(names).items():
            assert doc["lease_lost"] is None and not doc["errors"], (name, doc)
        if {s for s in statuses(admin).values()} == {("active", JobStatus.RUNNING.value)}:
            return n
    pytest.fail(f"jobs not all running after {most} rounds: {Counter(statuses(admin).values())}")


def no_duplicates_no_leaks(fleet: ProcessFleet, admin: Store, jobs: int) -> None:
    """0 leaks (the cloud holds exactly the live attempts' machines, one per active job), 0 lost jobs, and 0
    duplicate launches: the cloud accepted exactly one launch per job (nothing failed here, so a job's one
    machine is the only one it ever had)."""
    check_invariants(fleet.fakes, admin)
    final = statuses(admin)
    assert len(final) == jobs and set(final.values()) == {("active", JobStatus.RUNNING.value)}
    of = job_of_launch(admin)
    per_job = Counter(of[launch_id(c, fleet.fakes)] for c in accepted_launches(fleet))
    assert set(per_job) == set(final) and set(per_job.values()) == {1}, per_job.most_common(3)
    assert len(fleet.fakes.lam.instances) == jobs


# -- the tests -----------------------------------------------------------------------------------------

@pytest.mark.slow      # 300 launches through three real engines: ~20 s of CPU, 20-45 s on a loaded 2-core box
def test_300_jobs_over_three_daemon_processes_and_one_sigkilled_mid_launch(fleet: ProcessFleet) -> None:
    admin = open_store(fleet.url)                  # creates the schema before any daemon opens it
    try:
        add_jobs(admin, [f"job-{n:03d}" for n in range(300)], fleet.now)
        fleet.start()
        settle(fleet, admin)
        launched_by = Counter(c.daemon for c in accepted_launches(fleet))
        held = Counter(owners(admin).values())
        for name in NAMES:                         # each daemon drives 20% to 50% of the jobs
            assert 60 <= launched_by[name] <= 150 and 60 <= held[name] <= 150, (launched_by, held)
        assert sum(launched_by.values()) == 300

        # 30 more jobs; d1 is held just after the cloud accepted its 3rd launch of them (LAUNCHED never
        # written), and SIGKILLed there.
        add_jobs(admin, [f"late-{n:02d}" for n in range(30)], fleet.now)
        fleet.arm("d1", "after-launch-call", skip=2)
        before = len(accepted_launches(fleet))
        answers = fleet.round()
        assert answers["d1"]["crashpoint"] == "after-launch-call", answers["d1"]
        assert all(answers[n]["lease_lost"] is None and not answers[n]["errors"] for n in ("d2", "d3")), answers
        fleet.daemons["d1"].wait_stopped()
        fleet.daemons["d1"].proc.kill()
        assert fleet.daemons["d1"].proc.wait(timeout=READ_TIMEOUT_S) == -signal.SIGKILL
        killed_at = fleet.now
        in_flight = [c for c in accepted_launches(fleet)[before:] if c.daemon == "d1"]
        assert len(in_flight) == 3                 # the 3rd is the one d1 died in
        orphaned = {j for j, o in owners(admin).items() if o == "d1"}
        assert len(orphaned) >= 100

        took: timedelta | None = None
        while took is None:
            assert fleet.now - killed_at < TTL, "d1's jobs not taken over within one lease period"
            for name, doc in fleet.round(("d2", "d3")).items():
                assert doc["lease_lost"] is None and not doc["errors"], (name, doc)
            now_owned = owners(admin)
            if all(now_owned[j] in ("d2", "d3") for j in orphaned):
                took = fleet.now - killed_at
            else:                                  # until d1's lease lapses nobody touches its jobs
                assert all(now_owned[j] == "d1" for j in orphaned), Counter(now_owned[j] for j in orphaned)
        assert took <= TTL
        settle(fleet, admin, ("d2", "d3"))
        no_duplicates_no_leaks(fleet, admin, 330)
        print(f"\nprocesses: 300 jobs launched by {dict(sorted(launched_by.items()))},"
              f" held {dict(sorted(held.items()))};"
              f" d1 SIGKILLed after the cloud accepted launch 3 of its late jobs, holding {len(orphaned)} jobs;"
              f" all taken over by d2/d3 {took.total_seconds():.0f} s later (lease {TTL.total_seconds():.0f} s);"
              f" 330 jobs running, {len(fleet.fakes.lam.instances)} machines, 0 duplicate launches, 0 leaks")
    finally:
        admin.close()


@pytest.mark.parametrize("point", ["before-launch-call", "after-launch-call"])
def test_a_daemon_process_sigstopped_mid_launch_past_its_lease_acts_on_nothing_after_sigcont(
        fleet: ProcessFleet, point: str) -> None:
    """Stopped with LAUNCH_REQUESTED written and its launch call not made (the new holder asks the cloud with
    the same launch id), or just after the cloud accepted it (the new holder adopts the machine); either way
    the resumed daemon's next step would be a cloud call or a write for a job it no longer holds."""
    admin = open_store(fleet.url)
    try:
        add_jobs(admin, [f"job-{n:02d}" for n in range(30)], fleet.now)
        fleet.start()
        settle(fleet, admin)
        add_jobs(admin, [f"more-{n}" for n in range(9)], fleet.now)
        fleet.arm("d1", point, skip=0)             # d1 stops itself there (SIGSTOP)
        answers = fleet.round()
        assert answers["d1"]["crashpoint"] == point, answers["d1"]
        fleet.daemons["d1"].wait_stopped()
        stopped_at = fleet.now
        held_by_d1 = {j for j, o in owners(admin).items() if o == "d1"}
        generation_then = generations(admin)
        assert held_by_d1

        while fleet.now <= stopped_at + TTL:       # past its lease, d2 and d3 take its jobs over
            for name, doc in fleet.round(("d2", "d3")).items():
                assert doc["lease_lost"] is None and not doc["errors"], (name, doc)
        now_owned = owners(admin)
        assert all(now_owned[j] in ("d2", "d3") for j in held_by_d1), Counter(now_owned[j] for j in held_by_d1)
        after = generations(admin)
        assert all(after[j] > generation_then[j] for j in held_by_d1)

        # SIGCONT: d1 goes on from where it stopped, at the clock's time now; the fence stops its tick before
        # its launch call. Only d1 runs until it answers, and the cloud's log says it asked nothing at all
        # (not even the listing Lambda's launch makes first to find a machine of the same launch id).
        mark = len(fleet.cloud.calls)
        os.kill(fleet.daemons["d1"].proc.pid, signal.SIGCONT)
        resumed = fleet.daemons["d1"].read()
        assert resumed["lease_lost"] and "failed" not in resumed, resumed.get("failed")
        assert [c for c in fleet.cloud.calls[mark:] if c.daemon == "d1"] == []

        # It joins again (a new epoch) and takes a share like any other: it acts only on jobs it holds anew.
        mark = len(fleet.cloud.calls)
        settle(fleet, admin)
        for _ in range(2):
            for name, doc in fleet.round().items():
                assert doc["lease_lost"] is None and not doc["errors"], (name, doc)
        final_owners, final_gen, of = owners(admin), generations(admin), job_of_launch(admin)
        for call in fleet.cloud.changing(mark):
            job = of[launch_id(call, fleet.fakes)]
            if call.daemon == "d1":
                assert final_owners[job] == "d1" and final_gen[job] > after[job], call
        assert Counter(final_owners.values())["d1"] >= 1
        no_duplicates_no_leaks(fleet, admin, 39)
        print(f"\npause: d1 SIGSTOPped at {point} holding {len(held_by_d1)} jobs; d2/d3 took them over"
              f" after {TTL.total_seconds():.0f} s; after SIGCONT: lease lost, 0 cloud calls by d1; shares now"
              f" {dict(sorted(Counter(final_owners.values()).items()))}")
    finally:
        admin.close()
