"""How a pod (RunPod, Vast) gets orch's boot script: base64 in one environment variable, decoded by python3.

A pod IS the job's container, started from an image orch does not control: it may have no bash, curl, base64 or
Docker. The boot script needs only ``sh`` and ``python3`` (orchestrator/runtime/boot.py), and so does the line
that unpacks it here. The script rides in the pod's environment, not in a command field, because Vast's
``onstart`` takes at most 4,048 characters (Vast OpenAPI); the command that runs it stays a few hundred.
"""

from __future__ import annotations

import base64
import shlex

__all__ = ["BOOT_ENV", "boot_env_value", "run_boot_from_env"]

#: The environment variable that carries the boot script (base64 of its bytes).
BOOT_ENV = "ORCH_BOOT_B64"


def boot_env_value(script: str) -> str:
    return base64.b64encode(script.encode()).decode()


def run_boot_from_env(path: str, log: str) -> str:
    """A POSIX sh line: write ``$ORCH_BOOT_B64`` decoded to ``path`` (python3, no base64 tool) and run it with sh,
    its output to ``log``. Fails (non-zero) when the variable is absent."""
    # Double quotes only, so the line nests in a single-quoted ``sh -c`` with little escaping.
    decode = f'import base64,os;open("{path}","wb").write(base64.b64decode(os.environ["{BOOT_ENV}"]))'
    return f"python3 -c {shlex.quote(decode)} && sh {shlex.quote(path)} > {shlex.quote(log)} 2>&1"
