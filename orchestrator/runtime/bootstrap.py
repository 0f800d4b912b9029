"""Put a job onto a reachable node over a Transport and start it so it outlives the SSH session.

Steps: wait for SSH to answer; make the work dir; upload the agent, the rendered script, the agent
config and (0600) the secrets env file; start the agent detached (setsid + nohup, stdin from
/dev/null); the agent sources nothing itself: the start command loads the secrets file into the
agent's environment and deletes it, so secret values live only in process memory afterwards.
Finally read the first status the agent writes.

The Transport is structural (typing.Protocol): providers/ssh/transport.py's SSH transport fits, and
so does a local one in tests.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from orchestrator.runtime.render import (
    AGENT_CONFIG_NAME,
    AGENT_SCRIPT_NAME,
    SECRETS_ENV_NAME,
    STARTUP_SCRIPT_NAME,
    agent_source,
    render_node,
)
from orchestrator.runtime.render_input import RenderInput
from orchestrator.runtime.status import AgentStatus, StatusFormatError, parse_status
from providers.ssh.errors import TransportError

# Fix found by the e2e (tests/e2e): the SSH transport raises TransportError subclasses (unreachable,
# RemotePathError for a status file not written yet), which are not OSError. Both waits below treat
# them like the OSError of a local transport: not ready yet, try again until the deadline.
_NOT_READY: tuple[type[BaseException], ...] = (OSError, EOFError, ConnectionError, TransportError)

__all__ = ["BootstrapError", "BootstrapResult", "ExecResultLike", "Transport", "bootstrap", "wait_for_ssh"]


class ExecResultLike(Protocol):
    @property
    def exit_code(self) -> int: ...
    @property
    def stdout(self) -> str | bytes: ...
    @property
    def stderr(self) -> str | bytes: ...


class Transport(Protocol):
    def exec(self, cmd: str, timeout: float) -> ExecResultLike: ...
    def put(self, data_or_path: bytes | str, remote_path: str, mode: int) -> None: ...
    def get(self, remote_path: str) -> bytes: ...


class BootstrapError(RuntimeError):
    """The node could not be prepared or the agent did not come up; the message says which step."""


@dataclass(frozen=True)
class BootstrapResult:
    work_dir: str
    status_path: str
    status: AgentStatus


def _text(v: str | bytes) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def wait_for_ssh(transport: Transport, deadline_s: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, interval_s: float = 2.0) -> None:
    """Until ``true`` runs on the node; a fresh VM refuses or resets connections for a while."""
    end = clock() + deadline_s
    last: Exception | None = None
    while True:
        try:
            if transport.exec("true", timeout=15).exit_code == 0:
                return
        except _NOT_READY as exc:  # the transport's connection failures
            last = exc
        if clock() >= end:
            raise BootstrapError(f"SSH did not answer within {deadline_s:.0f}s: {last}")
        sleep(interval_s)


#: How often the node itself looks for the file ``await_file`` waits for (no round trip per look).
AWAIT_STEP_S = 0.05


def await_file(transport: Transport, path: str, deadline_s: float) -> bool:
    """Wait ON THE NODE, in one exec, until ``path`` exists and is not empty (the agent's first status), at
    most ``deadline_s``; True when it does. The job starts as soon as the agent writes it, so waiting here
    rather than a round trip every half second is what puts a replacement's RUNNING right after its start.
    A connection failure answers False: the caller's own reads decide."""
    looks = max(1, int(deadline_s / AWAIT_STEP_S))
    q = shlex.quote(path)
    cmd = (f"i=0; while [ ! -s {q} ] && [ $i -lt {looks} ]; do sleep {AWAIT_STEP_S}; i=$((i+1)); done; "
           f"[ -s {q} ]")
    try:
        return transport.exec(cmd, timeout=deadline_s + 15).exit_code == 0
    except _NOT_READY:
        return False


def _secrets_env(names: tuple[str, ...], values: Mapping[str, str]) -> bytes:
    missing = [n for n in names if n not in values]
    if missing:
        raise BootstrapError(f"secrets not set in the launch environment: {', '.join(missing)}")
    return "".join(f"export {n}={shlex.quote(values[n])}\n" for n in names).encode()


def start_command(work_dir: str, launch_id: str = "") -> str:
    """The shell line that starts the agent detached (exposed for tests and `orch render`). ``launch_id`` goes
    into the agent's environment (``ORCH_LAUNCH_ID``), as startup.sh puts it into the job's: ending the launch
    finds every process of it by that mark (providers/ssh/cleanup.py)."""
    w = shlex.quote(work_dir)
    mark = f"ORCH_LAUNCH_ID={shlex.quote(launch_id)} " if launch_id else ""
    return (f"cd {w} && if [ -f {SECRETS_ENV_NAME} ]; then set -a; . ./{SECRETS_ENV_NAME}; set +a; "
            f"rm -f {SECRETS_ENV_NAME}; fi && {mark}setsid nohup python3 {AGENT_SCRIPT_NAME} "
            f"--config {AGENT_CONFIG_NAME} "
            f"> agent.log 2>&1 < /dev/null & echo $!")


def stage(transport: Transport, ri: RenderInput, secret_values: Mapping[str, str], *,
          code_pack: bytes | None = None) -> str:
    """Put everything the launch's agent needs in its work dir (returned), without starting it: what a
    replacement does while the noticed machine before it still drains, so only the start is left once that
    one has committed. Uploads overwrite (safe to repeat); secrets land in a 0600 file the start deletes."""
    if ri.code is not None and code_pack is None:
        raise BootstrapError(f"job {ri.job_name} ships code {ri.code.sha256[:12]} but no pack was given")
    node = render_node(ri)
    work = ri.resolved_work_dir
    res = transport.exec(f"mkdir -p {shlex.quote(work)}", timeout=30)
    if res.exit_code != 0:
        raise BootstrapError(f"mkdir {work}: {_text(res.stderr).strip()}")
    join = lambda name: str(PurePosixPath(work) / name)  # noqa: E731
    transport.put(agent_source(), join(AGENT_SCRIPT_NAME), 0o755)
    transport.put(node.script.encode(), join(STARTUP_SCRIPT_NAME), 0o755)
    transport.put(node.agent_config.encode(), join(AGENT_CONFIG_NAME), 0o644)
    if ri.code is not None and code_pack is not None:
        transport.put(code_pack, join(ri.code.file), 0o644)
    if ri.secrets:
        transport.put(_secrets_env(ri.secrets, secret_values), join(SECRETS_ENV_NAME), 0o600)
    return work


def bootstrap(transport: Transport, ri: RenderInput, secret_values: Mapping[str, str], *,
              ssh_deadline_s: float = 300.0, status_deadline_s: float = 60.0,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
              code_pack: bytes | None = None, staged: bool = False) -> BootstrapResult:
    """Upload and start. Idempotent enough to rerun: uploads overwrite, but it starts another agent,
    so callers check the status file first when re-attaching. ``code_pack``: the pinned pack's bytes when
    ``ri.code`` is set (orchestrator/runtime/codepack.py); copied as ``ri.code.file``, unpacked by the agent.
    ``staged``: ``stage`` already put this launch's files there (and SSH answered): only the start is left."""
    work = ri.resolved_work_dir
    if not staged:
        wait_for_ssh(transport, ssh_deadline_s, clock, sleep)
        stage(transport, ri, secret_values, code_pack=code_pack)
    join = lambda name: str(PurePosixPath(work) / name)  # noqa: E731
    res = transport.exec(start_command(work, dict(ri.env).get("ORCH_LAUNCH_ID", "")), timeout=30)
    if res.exit_code != 0:
        raise BootstrapError(f"starting the agent: {_text(res.stderr).strip()}")
    status_path = ri.agent.status_path if ri.agent.status_path.startswith("/") else join(ri.agent.status_path)
    end = clock() + status_deadline_s
    await_file(transport, status_path, status_deadline_s)
    while True:
        try:
            return BootstrapResult(work, status_path, parse_status(transport.get(status_path)))
        except (*_NOT_READY, StatusFormatError) as exc:
            if clock() >= end:
                raise BootstrapError(f"agent wrote no status at {status_path} within "
                                     f"{status_deadline_s:.0f}s: {exc}") from None
        sleep(0.5)
