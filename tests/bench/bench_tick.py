#!/usr/bin/env python3
"""Benchmark: what a reconcile tick costs with N running jobs shared by K daemons.

    python tests/bench/bench_tick.py --jobs 100000 --daemons 4 [--ticks 8] [--database-url URL]

Ends with one line: ``jobs=N daemons=K first_tick_s=.. steady_tick_s=.. steady_best_s=.. per_daemon_cpu_s=..
fleet_cpu_s=.. server_cpu_s=..``; with ``--compare``
one such line for one daemon, then one for K daemons run next on the same database and fake (the one daemon
leaves the fleet between), and ``compare: K daemons' steady round / one daemon's = ..``: a paired comparison.

* ``first_tick_s``: CPU seconds of a daemon's first tick after it starts (the restart cost: it claims its
  share, parses its jobs' manifests, reads their spend marks), the most of the K daemons.
* ``steady_tick_s``: wall seconds of a steady round, the K daemons ticking at once: the median of the steady
  rounds from round 3 on (rounds 1 and 2 still settle: at 10k they cost 2-5x a later round's CPU; with
  ``--ticks`` under 3, the median of all), so one noisy round (a round is ~0.1 s at 10k) moves it little;
  ``steady_best_s``: the best of those rounds.
* ``per_daemon_cpu_s``: CPU seconds of one daemon's steady tick (the median over the same rounds; the most of
  the K).
* ``fleet_cpu_s``, ``server_cpu_s``: the CPU seconds of a steady round's work, the K daemons' together and
  the PostgreSQL backends' serving them (read from ``/proc/<pid>/schedstat``: a server on this machine;
  ``nan`` otherwise), medians over the same rounds. On a machine with fewer free cores than daemons, a
  round's wall follows their sum more than any one daemon's tick; they move little with the machine's load.

The store is PostgreSQL: ``--database-url`` or ``$ORCH_TEST_DATABASE_URL`` names a server, on which a fresh
database is created and dropped afterwards. Without one the store is a SQLite file and K must be 1. The
Lambda wire fake (one JSON list call for every instance) runs in a child process with N running instances
(it answers an unchanged listing from its encoded bytes: ``_encoded_listing``);
each daemon is its own process (its own connection, adapters, lease owner), measured with
``time.process_time()`` in that process, so neither the fake's CPU nor the database server's is counted.
On PostgreSQL the daemons share one cloud listing per tick (orchestrator/store/listings.py; each round's line
says how many list calls reached the cloud). Each daemon pauses garbage collection for its first tick and settles its
heap after it as ``orch daemon`` does (``orchestrator.daemon.loop``; the settling's CPU, once, is printed, not
counted in any tick). Not a test: it asserts nothing; it reports.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OWNER = "bench"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
STEP = timedelta(seconds=15)


def _serve(port: int, n: int, ready) -> None:  # type: ignore[no-untyped-def]
    from tests.fakes.lambda_cloud import DEFAULT_TYPES, LambdaFake, _Inst
    from tests.fakes.lr_base import FakeServer

    fake = LambdaFake()
    a100 = next(t for t in DEFAULT_TYPES if t.name == "gpu_1x_a100_sxm4")
    for i in range(n):
        fake.instances[f"i{i:08d}"] = _Inst(f"i{i:08d}", f"orch-{OWNER}-l{i:012x}", a100, "us-west-2", ["orch"],
                                            status="active", ip=f"198.51.{i // 250 % 250}.{i % 250 + 1}",
                                            private_ip="10.0.0.1")
    FakeServer(_encoded_listing(fake), port).start()
    ready.set()
    while True:
        time.sleep(3600)


def _encoded_listing(fake):  # type: ignore[no-untyped-def]
    """``fake.handle``, answering the instance listing from its encoded bytes while nothing was launched or
    terminated since they were encoded (any request but a GET encodes it again) and every machine was active
    (a read moves a booting or terminating one on). At 100k machines the fake's
    own dispatch and JSON encoding took ~2 s of CPU per listing on this machine's cores: cloud time, not the
    daemons', and in the critical path of every round (the other daemons wait for the lister's listing)."""
    import json

    from tests.fakes.lr_base import Reply

    held: list[object] = [None, b""]

    def handle(method: str, path: str, body: object, headers: dict[str, str]) -> Reply:
        if method != "GET" or path.split("?", 1)[0] != "/api/v1/instances":
            held[0] = None
            return fake.handle(method, path, body, headers)  # type: ignore[no-any-return]
        if held[0] is None:
            reply = fake.handle(method, path, body, headers)
            if reply.status != 200:
                return reply  # type: ignore[no-any-return]
            if any(i.status != "active" for i in fake.instances.values()):
                return reply  # type: ignore[no-any-return]   # reading moves these on: not kept
            held[:] = [True, json.dumps(reply.body).encode()]
        return Reply(200, held[1])

    return handle


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed_store(url: str, n: int, now: datetime) -> None:
    """N active jobs (each its own manifest and content hash), each with a running attempt and instance."""
    from sqlalchemy import insert

    from orchestrator.manifest.schema import Manifest
    from orchestrator.store import open_store
    from orchestrator.store.models import Attempt, InstanceRow, Job

    store = open_store(url)
    doc = {"apiVersion": "orch/v1", "kind": "Job", "name": "x", "resources": {"gpu": ["A100-40G"], "count": 1},
           "market": "on-demand", "providers": {"allow": ["lambda"]},
           "run": {"launcher": "command", "command": "python train.py"}}
    manifest = Manifest.model_validate(doc).to_json()
    for start in range(0, n, 10_000):
        jobs, attempts, instances = [], [], []
        for i in range(start, min(n, start + 10_000)):
            name = f"job-{i:06d}"
            body = {**manifest, "name": name}
            digest = "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
            jobs.append(dict(id=i + 1, name=name, manifest=body, manifest_hash=digest, source_path=None,
                             desired_state="active", status="running", applied_at=now, created_at=now,
                             updated_at=now, relaunch_count=0, lease_generation=0))
            lid = f"l{i:012x}"
            attempts.append(dict(id=i + 1, job_id=i + 1, generation=1, node_rank=0, launch_id=lid, state="running",
                                 started_at=now, created_at=now, updated_at=now))
            instances.append(dict(provider="lambda", instance_id=f"i{i:08d}", launch_id=lid, owner=OWNER,
                                  job_id=i + 1, instance_type="gpu_1x_a100_sxm4", region="us-west-2", zone=None,
                                  market="on-demand", price_hr=1.29, gpu="A100-40G", gpu_count=1, state="running",
                                  raw_state="active", public_ip=f"198.51.{i // 250 % 250}.{i % 250 + 1}",
                                  ssh_port=22, ssh_user="ubuntu", host_keys=[], created_at=now, updated_at=now))
        with store.engine.begin() as conn:
            conn.execute(insert(Job.__table__), jobs)  # type: ignore[attr-defined]
            conn.execute(insert(Attempt.__table__), attempts)  # type: ignore[attr-defined]
            conn.execute(insert(InstanceRow.__table__), instances)  # type: ignore[attr-defined]
    if store.dialect == "postgresql":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("ANALYZE")
    store.close()


def _daemon(url: str, port: int, name: str | None, conn: Connection, profile: str = "") -> None:
    """One daemon: joins, then ticks on each command and answers (cpu seconds, wall seconds, quiet). With
    ``profile`` ("last" or "first"), that tick's profile (the functions taking most time, cumulative) and its SQL
    statements go to stderr."""
    from orchestrator.config.file import OrchConfig
    from orchestrator.daemon.assembly import ServiceSettings, build_service
    from orchestrator.daemon.loop import pause_collection, settle_heap
    from providers.lambdalabs.adapter import LambdaProvider
    from tests.contract.harness_lambda import fast_settings
    from tests.daemon_world import LAMBDA_A100

    clock = [T0]
    provider = LambdaProvider(fast_settings(f"http://127.0.0.1:{port}/api/v1").model_copy(update={"timeout_s": 600}),
                              catalog=())
    service = build_service(config=OrchConfig(owner=OWNER), store_url=url, providers={"lambda": provider},
                            catalog=[LAMBDA_A100], clock=lambda: clock[0], lease_owner=name,
                            settings=ServiceSettings(lease_ttl=timedelta(minutes=10)))
    join = getattr(service.engine_store, "join", None)
    if callable(join):
        join(clock[0])
    conn.send("joined")
    pause_collection()          # as the daemon does before its first tick
    settled = False
    last = None
    try:
        while (msg := conn.recv()) is not None:
            clock[0] = msg
            if profile and (profile == "last" or last is None):
                import cProfile

                statements = _count_statements(service)
                prof = cProfile.Profile(time.process_time)
                prof.enable()
            lister = service.reconciler.deps.providers["lambda"]
            asked = getattr(lister, "listings", None)
            cpu, wall = time.process_time(), time.perf_counter()
            report = service.reconciler.tick()
            if profile and (profile == "last" or last is None):
                prof.disable()
                last = prof
                counted = {text: list(slot) for text, slot in statements.items()}   # this tick's, not later ones'
            conn.send((time.process_time() - cpu, time.perf_counter() - wall, report.quiet and not report.errors,
                       str(report.errors[:2]), None if asked is None else lister.listings - asked))
            if not settled:     # as the daemon does after its first tick (its CPU is not a tick's: reported)
                cpu = time.process_time()
                settle_heap()
                print(f"settled the heap after the first tick: {time.process_time() - cpu:.2f} s CPU",
                      file=sys.stderr, flush=True)
                settled = True
    finally:
        service.close()
        if profile:
            import pstats

            print(f"--- {name or 'the daemon'}: the {profile} tick's profile (CPU seconds, under cProfile)",
                  file=sys.stderr)
            pstats.Stats(last, stream=sys.stderr).sort_stats("cumulative").print_stats(60)
            pstats.Stats(last, stream=sys.stderr).sort_stats("tottime").print_stats(30)
            if os.environ.get("BENCH_TICK_PROFILE_OUT"):     # for pstats' callers/callees views
                last.dump_stats(os.environ["BENCH_TICK_PROFILE_OUT"])
            print("--- its SQL statements (count, rows fetched, statement)", file=sys.stderr)
            for text, (count, rows) in sorted(counted.items(), key=lambda kv: -kv[1][1]):
                print(f"{count:6d} {rows:7d}  {text}", file=sys.stderr)


def _count_statements(service) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    """From now on (replacing the previous tick's counter): each SQL statement's count and rows fetched."""
    from sqlalchemy import event

    engine = service.engine_store.store.engine
    counts: dict[str, list[int]] = {}
    for fn in getattr(engine, "_bench_listeners", ()):
        event.remove(engine, "after_cursor_execute", fn)

    def after(conn, cursor, statement, params, context, executemany):  # type: ignore[no-untyped-def]
        slot = counts.setdefault(" ".join(statement.split())[:110], [0, 0])
        slot[0] += 1
        slot[1] += max(cursor.rowcount, 0) if statement.lstrip().upper().startswith("SELECT") else 0

    event.listen(engine, "after_cursor_execute", after)
    engine._bench_listeners = (after,)
    return counts


def _server_database(base: str) -> tuple[str, str]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"orch_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return name, make_url(base).set(database=name).render_as_string(hide_password=False)


def _drop(base: str, name: str) -> None:
    from sqlalchemy import create_engine, text

    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


#: First tick CPU (most of the K), steady round wall (median), steady round wall (best), steady CPU (median; the
#: most of the K), the K daemons' steady CPU together and PostgreSQL's in a round (medians; NaN: not known).
Figures = tuple[float, float, float, float, float, float]
#: The first round counted as steady (rounds 1 and 2 still settle).
WARM = 3


def bench(n: int, k: int, ticks: int, base: str | None, profile: str = "", compare: bool = False
          ) -> list[tuple[int, Figures]]:
    """Seed N jobs and run K daemons for ``ticks`` steady rounds; ``compare``: one daemon first, then K on the
    same database and the same fake (the first daemon leaves the fleet between), so the two are paired."""
    port = free_port()
    ready = multiprocessing.Event()
    fake = multiprocessing.Process(target=_serve, args=(port, n, ready), daemon=True)
    fake.start()
    tmp = tempfile.TemporaryDirectory()
    dbname, url = _server_database(base) if base else (None, f"sqlite:///{tmp.name}/orch.db")
    try:
        if not ready.wait(600):
            raise RuntimeError("the fake did not start")
        seed_store(url, n, T0)
        print(f"seeded {n} jobs", file=sys.stderr, flush=True)
        if not compare:
            return [(k, _phase(url, port, k, ticks, 0, bool(base), profile))]
        print("--- one daemon", file=sys.stderr, flush=True)
        one = _phase(url, port, 1, ticks, 0, True, profile)
        _leave(url, "bench-0")
        print(f"--- {k} daemons, on the same database", file=sys.stderr, flush=True)
        return [(1, one), (k, _phase(url, port, k, ticks, ticks + 1, True, ""))]
    finally:
        fake.kill()
        fake.join()
        if base and dbname:
            _drop(base, dbname)
        tmp.cleanup()


def _leave(url: str, owner: str) -> None:
    """``owner`` leaves the fleet (its jobs free at once): the next daemons start as a fleet starting afresh."""
    from orchestrator.store import open_store
    from orchestrator.store.fleet import leave

    store = open_store(url)
    try:
        with store.transaction() as tx:
            leave(tx, owner)
    finally:
        store.close()


def _phase(url: str, port: int, k: int, ticks: int, first_round: int, named: bool, profile: str) -> Figures:
    """K daemon processes, joined, then ``ticks + 1`` rounds (the clock goes on from ``first_round``)."""
    daemons: list[tuple[multiprocessing.Process, Connection]] = []
    servers: list[float | None] = []
    try:
        for i in range(k):
            parent, child = multiprocessing.Pipe()
            proc = multiprocessing.Process(target=_daemon, args=(url, port, f"bench-{i}" if named else None, child,
                                                                     profile if i == 0 else ""))
            proc.start()
            daemons.append((proc, parent))
        for _, pipe in daemons:
            assert pipe.recv() == "joined"
        rounds = []
        server = _ServerCpu(url)
        for r in range(ticks + 1):
            now = T0 + STEP * (first_round + r + 1)
            server.start()
            start = time.perf_counter()
            for _, pipe in daemons:
                pipe.send(now)
            answers = [pipe.recv() for _, pipe in daemons]
            rounds.append((time.perf_counter() - start, answers))
            server_cpu = server.used()
            servers.append(server_cpu)
            calls = [a[4] for a in answers]
            print(f"round {r}: wall {rounds[-1][0]:.3f} s, each daemon's wall {[round(a[1], 3) for a in answers]}, "
                  f"cpu {[round(a[0], 3) for a in answers]}, server cpu "
                  f"{'?' if server_cpu is None else round(server_cpu, 3)}, quiet "
                  f"{[a[2] for a in answers]}, cloud list calls "
                  f"{sum(calls) if None not in calls else 'one per daemon (not shared)'}", file=sys.stderr, flush=True)
            for a in answers:
                if a[3] != "[]":
                    print(f"  errors: {a[3]}", file=sys.stderr)
        first = max(a[0] for a in rounds[0][1])
        warm = WARM if len(rounds) > WARM else 1
        steady = rounds[warm:]
        per_daemon = max(statistics.median(answers[d][0] for _, answers in steady) for d in range(k))
        fleet = statistics.median(sum(a[0] for a in answers) for _, answers in steady)
        known = [c for c in servers[warm:] if c is not None]
        return (first, statistics.median(w for w, _ in steady), min(w for w, _ in steady), per_daemon, fleet,
                statistics.median(known) if known else float("nan"))
    finally:
        for _, pipe in daemons:
            pipe.send(None)
        for proc, _ in daemons:
            proc.join(60)


class _ServerCpu:
    """CPU seconds the PostgreSQL server's backends for ``url``'s database used between ``start`` and ``used``
    (the daemons' connections: from ``/proc/<pid>/schedstat``, so only for a server on this machine; None
    where it cannot be read). Not counted in any tick's figures: printed beside them."""

    def __init__(self, url: str) -> None:
        from sqlalchemy import create_engine
        from sqlalchemy.engine import make_url
        from sqlalchemy.pool import NullPool

        postgres = make_url(url).get_backend_name() == "postgresql"
        self._engine = create_engine(url, poolclass=NullPool) if postgres else None   # no connection kept
        self._at: dict[int, int] = {}

    def _read(self) -> dict[int, int] | None:
        if self._engine is None:
            return None
        from sqlalchemy import text

        with self._engine.connect() as conn:
            pids = conn.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                     "AND pid <> pg_backend_pid()")).scalars().all()
        found = {}
        for pid in pids:
            try:
                found[int(pid)] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                return None
        return found

    def start(self) -> None:
        self._at = self._read() or {}

    def used(self) -> float | None:
        now = self._read()
        if now is None:
            return None
        return sum(ns - self._at.get(pid, 0) for pid, ns in now.items()) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--daemons", type=int, default=1)
    parser.add_argument("--ticks", type=int, default=8, help="steady rounds after the first (default 8)")
    parser.add_argument("--database-url", default=os.environ.get("ORCH_TEST_DATABASE_URL"),
                        help="a PostgreSQL server (default $ORCH_TEST_DATABASE_URL); none: SQLite, one daemon")
    parser.add_argument("--compare", action="store_true",
                        help="one daemon, then --daemons on the same database and fake: a line for each, and "
                             "their steady rounds' ratio")
    parser.add_argument("--profile", nargs="?", const="last", default="", choices=("last", "first"),
                        help="print the first daemon's last (or first) tick's profile to stderr (figures include "
                             "cProfile's cost)")
    args = parser.parse_args()
    if not args.database_url and (args.daemons != 1 or args.compare):
        parser.error("several daemons need PostgreSQL: --database-url or $ORCH_TEST_DATABASE_URL")
    results = bench(args.jobs, args.daemons, args.ticks, args.database_url, args.profile, args.compare)
    for k, (first, steady, best, per_daemon, fleet, server) in results:
        print(f"jobs={args.jobs} daemons={k} first_tick_s={first:.3f} steady_tick_s={steady:.3f} "
              f"steady_best_s={best:.3f} per_daemon_cpu_s={per_daemon:.3f} fleet_cpu_s={fleet:.3f} "
              f"server_cpu_s={server:.3f}", flush=True)
    if len(results) == 2:
        (_, one), (k, many) = results
        print(f"compare: {k} daemons' steady round / one daemon's = {many[1]:.3f} / {one[1]:.3f} s = "
              f"{many[1] / one[1]:.2f} (medians; best rounds: {many[2] / one[2]:.2f})", flush=True)

if __name__ == "__main__":
    main()
