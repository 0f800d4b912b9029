"""One fleet daemon as a real process, its ticks driven by the test: the engine exactly as ``orch daemon``
builds it (``build_service()`` from ``$ORCH_CONFIG`` and ``$ORCH_DATABASE_URL``, the lease owner from
``$ORCH_LEASE_OWNER``, joining the fleet before its first claim), with two seams a test sets from outside:

* the clock: read from a file (``--clock``, one ISO time) at every call, so all the daemons share the test's
  fake clock, and a process stopped mid-tick sees, once continued, the time the test moved on to meanwhile;
* the ticks: one per ``tick`` line on stdin (nothing runs on a timer), answered by one JSON line on stdout.

    python -m tests.support.fleet_daemon --clock now.txt

stdin commands, one per line:

* ``tick``: one reconcile tick; answers ``{"tick": n, "now", "owner", "held", "share", "live", ...report...,
  "lease_lost": null | why}`` (a tick the fence stopped answers with ``lease_lost`` set, one that failed
  otherwise with ``failed``; ``orch daemon`` logs either and ticks again);
* ``arm <crashpoint> <kill|stop> <skip>``: arm ``orchestrator.engine.crashpoints`` in this process (answers
  ``{"armed": name}``); with ``stop`` the process announces ``{"crashpoint": name, "pid": pid}`` on stdout and
  SIGSTOPs itself there, for the test to SIGKILL or SIGCONT;
* ``quit`` (or end of input): exit without leaving the fleet (its leases lapse, as a crashed daemon's do).

The first line it writes is ``{"ready": owner, "pid": pid}`` once it has joined the fleet.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from orchestrator.daemon.assembly import Service, build_service
from orchestrator.engine import crashpoints
from orchestrator.store.fleet import LeaseLostError


class FileClock:
    """The test's clock: the ISO time in ``path``, read afresh at every call (the test replaces the file
    atomically between rounds)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self) -> datetime:
        return datetime.fromisoformat(self.path.read_text().strip())


def _say(doc: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(doc, default=str) + "\n")
    sys.stdout.flush()


def _tick(service: Service, n: int) -> dict[str, object]:
    doc: dict[str, object] = {"tick": n, "now": service.reconciler.deps.clock().isoformat(),
                              "owner": service.lease_owner, "lease_lost": None}
    try:
        report = service.reconciler.tick()
    except LeaseLostError as exc:           # orch daemon logs it and ticks again later (run_tick)
        doc["lease_lost"] = str(exc)
    except Exception as exc:                # so does it any other failure; the test sees it here
        doc["failed"] = f"{type(exc).__name__}: {exc}"
    else:
        doc.update(asdict(report))
    holding = getattr(getattr(service.engine_store, "fleet", None), "holding", None)
    if holding is not None:
        doc.update(held=len(holding.jobs), share=holding.share, live=holding.live_daemons,
                   claimed=holding.claimed, released=holding.released)
    return doc


def _arm(point: str, action: str, skip: str) -> dict[str, object]:
    os.environ[crashpoints.ENV] = point
    os.environ[crashpoints.ACTION_ENV] = action
    os.environ[crashpoints.SKIP_ENV] = skip
    crashpoints.reset()
    return {"armed": point}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clock", required=True, type=Path)
    args = ap.parse_args(argv)
    clock = FileClock(args.clock)
    service = build_service(clock=clock)
    try:
        join = getattr(service.engine_store, "join", None)
        if callable(join):
            join(clock())                   # as orch daemon does: counted live before the first claim
        _say({"ready": service.lease_owner, "pid": os.getpid()})
        ticks = 0
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] == "quit":
                break
            if words[0] == "tick":
                ticks += 1
                _say(_tick(service, ticks))
            elif words[0] == "arm" and len(words) == 4:
                _say(_arm(*words[1:]))
            else:
                _say({"error": f"unknown command {line.strip()!r}"})
        return 0
    finally:
        service.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
