"""Named crash points for the crash-safety tests: ``ORCH_CRASHPOINT=name`` makes the process SIGKILL
itself when it reaches that point, exactly like a daemon killed by the OOM killer or a reboot.

Inert unless the variable is set; the names mark each step of the launch/relaunch state machine.

Two knobs for the multi-daemon tests (tests/support/fleet_daemon.py), which need a process held at a point
rather than dead there:

* ``ORCH_CRASHPOINT_SKIP=n``: the point lets ``n`` passes through before it fires (the 3rd launch, not the 1st).
* ``ORCH_CRASHPOINT_ACTION=stop``: instead of dying, the process writes ``{"crashpoint": name, "pid": pid}``
  as one line on stdout and stops itself with SIGSTOP, so the test knows it is stopped exactly there and can
  SIGKILL it (a death mid-launch) or SIGCONT it later (a pause). The point is disarmed once it fired.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

ENV = "ORCH_CRASHPOINT"
SKIP_ENV = "ORCH_CRASHPOINT_SKIP"
ACTION_ENV = "ORCH_CRASHPOINT_ACTION"

_passed: dict[str, int] = {}
_lock = threading.Lock()


def reset() -> None:
    """Forget the passes counted so far (a test arming a point again in a running process)."""
    with _lock:
        _passed.clear()


def crashpoint(name: str) -> None:
    if os.environ.get(ENV) != name:
        return
    with _lock:
        seen = _passed.get(name, 0)
        _passed[name] = seen + 1
    if seen < int(os.environ.get(SKIP_ENV) or 0):
        return
    if os.environ.get(ACTION_ENV) == "stop":
        os.environ.pop(ENV, None)
        sys.stdout.write(json.dumps({"crashpoint": name, "pid": os.getpid()}) + "\n")
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGSTOP)     # returns once the test sends SIGCONT
        return
    os.kill(os.getpid(), signal.SIGKILL)
