"""What the crash-safety tests share (tests/test_crash_safety*.py): `python -m orchestrator tick` (or
tests/support/crash_tick.py, the tick with the engine's clock and the agents' reports set from outside) as a REAL
subprocess against the wire fakes, with the store and config in the test's directory, and the matrix each file
prints of what the restarts did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from orchestrator.store import repo
from orchestrator.store.db import Store
from tests.daemon_world import CATALOG, T0, Fakes
from tests.support.forkserver import ForkServer

ROOT = Path(__file__).resolve().parents[1]

#: One row per case run: (step, crash point, how it died, what the restart did, the invariants checked).
MatrixRow = tuple[str, str, str, str, str]


def write_catalog(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rows = ["provider,instance_type,region,zone,gpu,gpu_count,vram_gb,vcpus,memory_gb,interconnect,market,price_hr,"
            "price_as_of,price_as_of_approximate"]
    for o in CATALOG:
        rows.append(f"{o.provider},{o.instance_type},\"{o.region}\",,{o.gpu},{o.gpu_count},{o.vram_gb},{o.vcpus},"
                    f"{o.memory_gb},{o.interconnect.value},{o.market.value},{o.price_hr},{o.price_as_of},false")
    (directory / "offers.csv").write_text("\n".join(rows) + "\n")
    as_of = {p: {"date": "2026-12-01", "note": "test catalog"} for p in ("vastai", "lambda")}
    (directory / "catalog.json").write_text(json.dumps({"approximate": False, "source": "test", "as_of": as_of}))


@dataclass
class Orch:
    """`python -m orchestrator ...` against the fakes, with the store and config in tmp_path: each run its own
    process, forked by the session's warm fork server (tests/support/forkserver.py) where one is given."""

    env: dict[str, str]
    server: ForkServer | None = None

    def run(self, *args: str, crashpoint: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if crashpoint:
            env["ORCH_CRASHPOINT"] = crashpoint
        return self.python_m("orchestrator", args, env)

    def python_m(self, module: str, args: tuple[str, ...] | list[str],
                 env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        if self.server is not None:
            return self.server.run(module, args, env=env, cwd=ROOT, timeout=120)
        return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, text=True,
                              capture_output=True, timeout=120)

    def ticks(self, *args: str, crashpoint: str | None = None) -> list[dict[str, object]]:
        done = self.run("tick", "--json", *args, crashpoint=crashpoint)
        assert done.returncode == 0, f"tick failed ({done.returncode}): {done.stderr[-2000:]}"
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def make_orch(fakes: Fakes, tmp_path: Path, server: ForkServer | None = None) -> Orch:
    """An ``Orch`` on a SQLite store, config and catalog in ``tmp_path``, the fakes as its clouds."""
    config = tmp_path / "config.yaml"
    config.write_text(fakes.config_yaml())
    write_catalog(tmp_path / "catalog")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(ORCH_CONFIG=str(config), ORCH_DATABASE_URL=f"sqlite:///{tmp_path / 'orch.db'}",
               ORCH_CATALOG_DIR=str(tmp_path / "catalog"), ORCH_ORPHAN_GRACE_S="0",
               XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_DATA_HOME=str(tmp_path / "data"),
               PYTHONPATH=str(ROOT))
    return Orch(env, server)


def creates_per_launch_id(fakes: Fakes) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in fakes.vast.requests:
        if r.method == "PUT" and r.path.startswith("/api/v0/asks/"):
            label = str((r.body or {}).get("label", ""))
            counts[label.rsplit("-", 1)[-1]] = counts.get(label.rsplit("-", 1)[-1], 0) + 1
    for r in fakes.lam.launches():
        name = str((r.body or {}).get("name", ""))
        counts[name.rsplit("-", 1)[-1]] = counts.get(name.rsplit("-", 1)[-1], 0) + 1
    return counts


BOOT_S, HEARTBEAT_S = 600, 300
CKPT = "s3://ckpt/train/step-5"


def drive(orch: Orch, now: datetime, agents: Path, *extra: str,
          crashpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**orch.env, "ORCH_BOOT_TIMEOUT_S": str(BOOT_S), "ORCH_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_S)}
    if crashpoint:
        env["ORCH_CRASHPOINT"] = crashpoint
    return orch.python_m("tests.support.crash_tick", ["--now", now.isoformat(), "--reports", str(agents), *extra],
                         env)


def heard(fakes: Fakes, orch: Orch, agents: Path, store: Store) -> tuple[datetime, float]:
    """Tick until the spot machine's agent has been heard (its heartbeat moving); returns the engine's time
    and the agent's last heartbeat."""
    [spot] = fakes.live_instances()["vastai"]
    now = T0
    for beat in range(1, 8):
        now += timedelta(seconds=30)
        agents.write_text(json.dumps({spot.instance_id: {"heartbeat": 1000 + beat, "checkpoint": [CKPT, 5]}}))
        assert drive(orch, now, agents).returncode == 0
        with store.transaction() as tx:
            [a] = repo.list_attempts(tx, repo.require_job(tx, "train").id or 0)
        if a.heard_at is not None:
            return now, 1000.0 + beat
    raise AssertionError("the agent was never heard")


def ticks_of(done: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def print_matrix(rows: list[MatrixRow], expected: int) -> None:
    """Prints what the cases of one file recorded (run with -s); every case of the file must have run."""
    print("\ncrash-safety matrix (step x crash point -> outcome after restart)")
    print(f"{'step':<9} {'crash point':<26} {'died':<8} {'restart did (all ticks until quiet)':<52} invariants")
    for step, point, died, did, inv in rows:
        print(f"{step:<9} {point:<26} {died:<8} {did:<52} {inv}")
    assert len(rows) == expected
