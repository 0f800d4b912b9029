"""``orch tick`` for the crash matrix's liveness cases: the engine exactly as ``orch tick`` builds it
(``build_service()`` from ``$ORCH_CONFIG`` and ``$ORCH_DATABASE_URL``, the daemon lock), with two seams a
test must set from outside a real process: the engine's clock (``--now``, moved on by ``--step-s`` after each
tick) and the nodes' agents, read from a JSON file (``--reports``: instance id -> ``{"heartbeat": float,
"checkpoint": [uri, step]}``, or null for an agent that cannot be read; ``"*"`` stands for every other
instance, ``{"alive": true}`` being an agent whose heartbeat follows the engine's clock; ``"gpu": [pct, ...]``
adds GPU utilization readings, for the idle step).

    python -m tests.support.crash_tick --now 2026-12-01T12:30:00+00:00 --reports agents.json \
        [--ticks N | --until-quiet] [--step-s S]

Prints one JSON object per tick, as ``orch tick --json`` does; ``ORCH_CRASHPOINT`` kills it as it kills orch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.daemon.assembly import build_service
from orchestrator.engine.hooks import AgentReport, Monitor
from orchestrator.store.leases import daemon_lock


class FileMonitor(Monitor):
    def __init__(self, path: Path, clock: Callable[[], datetime]) -> None:
        self.path = path
        self.clock = clock

    def read(self, job, attempt, instance):  # type: ignore[no-untyped-def]
        agents = json.loads(self.path.read_text()) if self.path.exists() else {}
        found = agents.get(instance.instance_id, agents.get("*"))
        if found is None:
            return None
        gpu = tuple(float(p) for p in found.get("gpu") or ())
        if found.get("alive"):
            return AgentReport(heartbeat_at=self.clock(), gpu_util_pct=gpu)
        ckpt = found.get("checkpoint")
        return AgentReport(heartbeat_at=datetime.fromtimestamp(float(found["heartbeat"]), UTC),
                           checkpoints=((ckpt[0], int(ckpt[1])),) if ckpt else (), gpu_util_pct=gpu)


class StepClock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--now", required=True)
    ap.add_argument("--reports", required=True, type=Path)
    ap.add_argument("--until-quiet", action="store_true")
    ap.add_argument("--ticks", type=int, default=1)
    ap.add_argument("--step-s", type=float, default=0.0)
    args = ap.parse_args(argv)
    clock = StepClock(datetime.fromisoformat(args.now))
    service = build_service(clock=clock, monitor=FileMonitor(args.reports, clock))
    try:
        with daemon_lock(service.store):
            for n in range(1, (20 if args.until_quiet else args.ticks) + 1):
                if n > 1:
                    clock.now += timedelta(seconds=args.step_s)
                report = service.reconciler.tick()
                doc = {"tick": n, **asdict(report), "quiet": report.quiet}
                sys.stdout.write(json.dumps(doc) + "\n")
                sys.stdout.flush()
                if args.until_quiet and report.quiet and not report.errors:
                    return 0
        return 1 if args.until_quiet else 0
    finally:
        service.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
