#!/usr/bin/env python3
"""Benchmark: CPU seconds of one steady reconcile tick with 100, 1,000 and 10,000 managed instances.

    python tests/bench/bench_tick.py [--sizes 100,1000,10000] [--ticks 3]

The Lambda wire fake (one JSON list call for every instance) runs in a CHILD process with N running
instances planted in it; the store (SQLite file) gets the matching jobs, running attempts and instance
rows in bulk. The orchestrator side is measured with time.process_time() in this process, so the
fake's own CPU is not counted. The first tick after start-up (manifests parsed, spend marks read) is
shown apart from the steady ones. Target: 10,000 instances <= 1 s CPU per steady tick, growth linear.
Not a test: it asserts nothing; it reports.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import socket
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OWNER = "bench"


def _serve(port: int, n: int, ready) -> None:  # type: ignore[no-untyped-def]
    from tests.fakes.lambda_cloud import DEFAULT_TYPES, LambdaFake, _Inst
    from tests.fakes.lr_base import FakeServer

    fake = LambdaFake()
    a100 = next(t for t in DEFAULT_TYPES if t.name == "gpu_1x_a100_sxm4")
    for i in range(n):
        fake.instances[f"i{i:08d}"] = _Inst(f"i{i:08d}", f"orch-{OWNER}-l{i:012x}", a100, "us-west-2", ["orch"],
                                            status="active", ip=f"198.51.{i // 250 % 250}.{i % 250 + 1}",
                                            private_ip="10.0.0.1")
    server = FakeServer(fake.handle, port).start()
    ready.set()
    while True:
        time.sleep(3600)
    server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed_store(url: str, n: int, now: datetime) -> None:
    from sqlalchemy import insert

    from orchestrator.manifest.schema import Manifest
    from orchestrator.store import open_store
    from orchestrator.store.models import Attempt, InstanceRow, Job

    store = open_store(url)
    doc = {"apiVersion": "orch/v1", "kind": "Job", "name": "x", "resources": {"gpu": ["A100-40G"], "count": 1},
           "market": "on-demand", "providers": {"allow": ["lambda"]},
           "run": {"launcher": "command", "command": "python train.py"}}
    manifest = Manifest.model_validate(doc).to_json()
    jobs, attempts, instances = [], [], []
    for i in range(n):
        name = f"job-{i:05d}"
        jobs.append(dict(id=i + 1, name=name, manifest={**manifest, "name": name}, manifest_hash="h", source_path=None,
                         desired_state="active", status="running", applied_at=now, created_at=now, updated_at=now,
                         relaunch_count=0))
        lid = f"l{i:012x}"
        attempts.append(dict(id=i + 1, job_id=i + 1, generation=1, node_rank=0, launch_id=lid, state="running",
                             started_at=now, created_at=now, updated_at=now))
        instances.append(dict(provider="lambda", instance_id=f"i{i:08d}", launch_id=lid, owner=OWNER, job_id=i + 1,
                              instance_type="gpu_1x_a100_sxm4", region="us-west-2", zone=None, market="on-demand",
                              price_hr=1.29, gpu="A100-40G", gpu_count=1, state="running", raw_state="active",
                              public_ip=f"198.51.{i // 250 % 250}.{i % 250 + 1}", ssh_port=22, ssh_user="ubuntu",
                              host_keys=[], created_at=now, updated_at=now))
    with store.engine.begin() as conn:
        conn.execute(insert(Job.__table__), jobs)  # type: ignore[attr-defined]
        conn.execute(insert(Attempt.__table__), attempts)  # type: ignore[attr-defined]
        conn.execute(insert(InstanceRow.__table__), instances)  # type: ignore[attr-defined]
    store.close()


def bench(n: int, ticks: int) -> tuple[float, list[float]]:
    from orchestrator.config import OrchConfig
    from orchestrator.service import ServiceSettings, build_service
    from providers.lambdalabs.adapter import LambdaProvider
    from tests.contract.harness_lambda import fast_settings
    from tests.daemon_world import LAMBDA_A100

    port = free_port()
    ready = multiprocessing.Event()
    child = multiprocessing.Process(target=_serve, args=(port, n, ready), daemon=True)
    child.start()
    try:
        if not ready.wait(120):
            raise RuntimeError("the fake did not start")
        clock_now = [datetime(2026, 12, 1, 12, 0, tzinfo=UTC)]
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/orch.db"
            seed_store(url, n, clock_now[0])
            provider = LambdaProvider(fast_settings(f"http://127.0.0.1:{port}/api/v1"), catalog=())
            service = build_service(config=OrchConfig(owner=OWNER), store_url=url, providers={"lambda": provider},
                                    catalog=[LAMBDA_A100], clock=lambda: clock_now[0], lease_owner=None,
                                    settings=ServiceSettings())
            times = []
            try:
                for _ in range(ticks + 1):
                    clock_now[0] += timedelta(seconds=15)
                    start = time.process_time()
                    report = service.reconciler.tick()
                    times.append(time.process_time() - start)
                    if report.errors or not report.quiet:
                        print(f"  warning: tick not quiet: {report}", file=sys.stderr)
            finally:
                service.close()
        return times[0], times[1:]
    finally:
        child.kill()
        child.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--ticks", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        first, steady = bench(n, args.ticks)
        best = min(steady)
        rows.append((n, first, best))
        print(f"{n:>6} instances: first tick {first:.3f} s CPU, steady tick {best:.3f} s CPU "
              f"({best / n * 1e6:.0f} us/instance)", flush=True)
    for (n0, _, t0), (n1, _, t1) in itertools.pairwise(rows):
        print(f"growth {n0} -> {n1} ({n1 / n0:.0f}x instances): steady CPU x{t1 / t0:.1f}")
    last = rows[-1]
    print(f"target: {last[0]} instances <= 1 s CPU per steady tick: {'met' if last[2] <= 1.0 else 'NOT met'} "
          f"({last[2]:.3f} s)")


if __name__ == "__main__":
    main()
