"""Named crash points for the crash-safety tests: ``ORCH_CRASHPOINT=name`` makes the process SIGKILL
itself when it reaches that point, exactly like a daemon killed by the OOM killer or a reboot.

Inert unless the variable is set; the names mark each step of the launch/relaunch state machine.
"""

from __future__ import annotations

import os
import signal

ENV = "ORCH_CRASHPOINT"


def crashpoint(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
