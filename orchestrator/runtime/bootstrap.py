"""Put a job onto a reachable node over a Transport and start it so it outlives the SSH session.

Steps: wait for SSH to answer; make the work dir; upload the agent, the rendered script, the agent
config and (0600) the secrets env file; start the agent detached (setsid + nohup, stdin from
/dev/null); the agent sources nothing itself: the start command loads the secrets file into the
agent's environment and deletes it, so secret values live only in process memory afterwards.
Finally read the first status the agent writes.

The Transport is structural (typing.Protocol): providers/ssh/connection.py's SSH transport fits, and
so does a local one in tests.
"""

from __future__ import annotations

import io
import shlex
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePosixPath
from typing import Protocol

from orchestrator.runtime.agent_app import agent_zipapp
from orchestrator.runtime.render import (
    AGENT_CONFIG_NAME,
    AGENT_SCRIPT_NAME,
    SECRETS_ENV_NAME,
    STARTUP_SCRIPT_NAME,
    render_node,
)
from orchestrator.runtime.render_input import RenderInput
from orchestrator.runtime.status import AgentStatus, StatusFormatError, parse_status
from providers.ssh.errors import TransportError

# Fix found by the e2e (tests/e2e): the SSH transport raises TransportError subclasses (unreachable,
# RemotePathError for a status file not written yet), which are not OSError. Both waits below treat
# them like the OSError of a local transport: not ready yet, try again until the deadline.
_NOT_READY: tuple[type[BaseException], ...] = (OSError, EOFError, ConnectionError, TransportError)

__all__ = ["GO_FILE_NAME", "BootstrapError", "BootstrapResult", "ExecResultLike", "Go", "Transport", "bootstrap",
           "give_go", "prestart_line", "wait_for_ssh"]


class ExecResultLike(Protocol):
    @property
    def exit_code(self) -> int: ...
    @property
    def stdout(self) -> str | bytes: ...
    @property
    def stderr(self) -> str | bytes: ...


class Transport(Protocol):
    def exec(self, cmd: str, timeout: float, *, stdin: bytes | None = None) -> ExecResultLike: ...
    def put(self, data_or_path: bytes | str, remote_path: str, mode: int) -> None: ...
    def get(self, remote_path: str) -> bytes: ...


class BootstrapError(RuntimeError):
    """The node could not be prepared or the agent did not come up; the message says which step."""


@dataclass(frozen=True)
class BootstrapResult:
    work_dir: str
    status_path: str
    status: AgentStatus


def text_of(v: str | bytes) -> str:
    """A command's output as text, whatever the transport handed back (undecodable bytes replaced)."""
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


#: How often the node itself looks for the agent's first status (``_await_here``: no round trip per look).
AWAIT_STEP_S = 0.05


def _secrets_env(names: tuple[str, ...], values: Mapping[str, str]) -> bytes:
    missing = [n for n in names if n not in values]
    if missing:
        raise BootstrapError(f"secrets not set in the launch environment: {', '.join(missing)}")
    return "".join(f"export {n}={shlex.quote(values[n])}\n" for n in names).encode()


#: The file whose creation starts the job of an agent started ahead of its go (``--await-go``), in its work
#: dir; ``<GO_FILE_NAME>.wait`` holds that agent's pid while it waits.
GO_FILE_NAME = "start.go"
#: How often the go's waiter on the node looks whether the agent took the go.
GO_STEP_S = 0.02


def start_command(work_dir: str, launch_id: str = "", *, await_go: bool = False) -> str:
    """The shell line that starts the agent detached (exposed for tests and `orch render`). ``launch_id`` goes
    into the agent's environment (``ORCH_LAUNCH_ID``), as startup.sh puts it into the job's: ending the launch
    finds every process of it by that mark (providers/ssh/cleanup.py). ``await_go``: the agent starts the job
    only once ``GO_FILE_NAME`` exists (``give_go``); its pid is written to ``<GO_FILE_NAME>.wait`` at once, so
    a go never finds "no agent" while its Python still starts."""
    w = shlex.quote(work_dir)
    mark = f"ORCH_LAUNCH_ID={shlex.quote(launch_id)} " if launch_id else ""
    go = f" --await-go {GO_FILE_NAME}" if await_go else ""
    record = f"; echo $! > {GO_FILE_NAME}.wait" if await_go else ""
    # Only the agent is put in the background (braces, not the whole list): $! is its pid, and the shell
    # stays in the work dir for whatever a caller runs after this line.
    return (f"cd {w} && if [ -f {SECRETS_ENV_NAME} ]; then set -a; . ./{SECRETS_ENV_NAME}; set +a; "
            f"rm -f {SECRETS_ENV_NAME}; fi && {{ {mark}setsid nohup python3 {AGENT_SCRIPT_NAME} "
            f"--config {AGENT_CONFIG_NAME}{go} "
            f"> agent.log 2>&1 < /dev/null & echo $!{record}; }}")


def prestart_line(ri: RenderInput) -> str:
    """Shell: start the staged launch's agent ahead of its go (``--await-go``), from the work dir's parent
    directory as any exec starts: it starts Python, unpacks the code and reports itself (job pending,
    ``awaits_go``) while the predecessor still drains, so the go has only the job's own start left. It does not
    wait for the agent: ``give_go`` waits on the node for the agent to take the go."""
    work = ri.resolved_work_dir
    line = start_command(work, dict(ri.env).get("ORCH_LAUNCH_ID", ""), await_go=True)
    return f"rm -f {shlex.quote(str(PurePosixPath(work) / GO_FILE_NAME))} && {{ {line}; }} >/dev/null"


class Go(Enum):
    """What ``give_go`` found: the agent took the go (its job started), no agent waits for one (start one),
    or the waiting agent has not taken it within the deadline (ask again later)."""

    TAKEN = "taken"
    NO_AGENT = "no-agent"
    NOT_YET = "not-yet"


def give_go(transport: Transport, ri: RenderInput, deadline_s: float) -> tuple[Go, AgentStatus | None]:
    """Start the job of the agent ``prestart`` left waiting: in ONE exec, check the agent named in
    ``<GO_FILE_NAME>.wait`` is alive, create the go file, wait on the node until the agent has removed it
    (which it does once the job started and its status says so) and print that status. A go not taken is
    taken back (removed), so an agent that comes to look later does not start a job nobody waits for."""
    w = shlex.quote(ri.resolved_work_dir)
    looks = max(1, int(deadline_s / GO_STEP_S))
    go, wait = GO_FILE_NAME, f"{GO_FILE_NAME}.wait"
    cmd = (f"cd {w} || exit 3; pid=$(cat {wait} 2>/dev/null) || exit 3; "
           f"kill -0 \"$pid\" 2>/dev/null || {{ rm -f {wait}; exit 3; }}; : > {go}; i=0; "
           f"while [ -e {go} ] && [ $i -lt {looks} ] && kill -0 \"$pid\" 2>/dev/null; do "
           f"sleep {GO_STEP_S}; i=$((i+1)); done; "
           f"if [ -e {go} ]; then rm -f {go}; kill -0 \"$pid\" 2>/dev/null && exit 4; rm -f {wait}; exit 3; fi; "
           f"cat {shlex.quote(ri.agent.status_path)}")      # relative to the work dir, where this runs
    res = transport.exec(cmd, timeout=deadline_s + 15)
    if res.exit_code == 3:
        return Go.NO_AGENT, None
    if res.exit_code != 0:
        return Go.NOT_YET, None
    try:
        return Go.TAKEN, parse_status(res.stdout)
    except StatusFormatError:
        return Go.TAKEN, None


#: The exit code of a start exec whose agent could not even be started (the shell's own failure).
_START_FAILED = 97
#: The exit code of an exec whose files could not be put (unpacked) in the work dir.
_PUT_FAILED = 96


def _remember(path: str) -> str:
    """Shell: keep ``path``'s content as it is before the start (empty when there is none) in ``$was``, for
    ``_await_here``."""
    return f"was=$({{ cat {shlex.quote(path)}; }} 2>/dev/null)"


def _await_here(path: str, deadline_s: float) -> str:
    """Shell: wait (on the node, in the exec it is part of) until ``path`` is a non-empty file whose content is
    not ``$was`` (``_remember``: what was there before the start), at most ``deadline_s``; then print it, or
    fail. A status left by an earlier agent of the launch (which the new one restores from) is there from the
    start: taken for the new agent's, it would answer before that agent wrote anything, or whether it ever
    does. The new agent's first status always differs from it (its pid, start time and heartbeat)."""
    q = shlex.quote(path)
    looks = max(1, int(deadline_s / AWAIT_STEP_S))
    new = f'[ -s {q} ] && [ "$(cat {q})" != "$was" ]'
    return (f"i=0; while ! {{ {new}; }} && [ $i -lt {looks} ]; do sleep {AWAIT_STEP_S}; i=$((i+1)); done; "
            f"{new} && cat {q}")


def _bundle(files: list[tuple[str, bytes, int]]) -> bytes:
    """The files (name, content, mode) as one uncompressed tar: one exec puts them all on the node."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, now
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _status_path(ri: RenderInput) -> str:
    sp = ri.agent.status_path
    return sp if sp.startswith("/") else str(PurePosixPath(ri.resolved_work_dir) / sp)


def stage(transport: Transport, ri: RenderInput, secret_values: Mapping[str, str], *,
          code_pack: bytes | None = None, prestart: bool = False) -> str:
    """Put everything the launch's agent needs in its work dir (returned), without starting it: what a
    replacement does while the noticed machine before it still drains, so only the start is left once that
    one has committed. Uploads overwrite (safe to repeat); secrets land in a 0600 file the start deletes.
    ``prestart``: in the same exec, start the agent ahead of its go (``prestart_line``)."""
    work = ri.resolved_work_dir
    files = _files(ri, secret_values, code_pack)
    # One exec, the files as a tar on its stdin (a put per file costs SFTP round trips each: most of a
    # start's time); see _put_files for the modes.
    res = transport.exec(_put_files(work) + (f" && {prestart_line(ri)}" if prestart else ""), timeout=120,
                         stdin=_bundle(files))
    if res.exit_code != 0:
        raise BootstrapError(f"putting the launch's files in {work}: {text_of(res.stderr).strip()}")
    return work


def _files(ri: RenderInput, secret_values: Mapping[str, str], code_pack: bytes | None) -> list[tuple[str, bytes, int]]:
    """The launch's files (name, content, mode): the agent, the startup script, the agent's config, the code
    pack when the job ships code, the secrets env file when it has secrets."""
    if ri.code is not None and code_pack is None:
        raise BootstrapError(f"job {ri.job_name} ships code {ri.code.sha256[:12]} but no pack was given")
    node = render_node(ri)
    files = [(AGENT_SCRIPT_NAME, agent_zipapp(), 0o755), (STARTUP_SCRIPT_NAME, node.script.encode(), 0o755),
             (AGENT_CONFIG_NAME, node.agent_config.encode(), 0o644)]
    if ri.code is not None and code_pack is not None:
        files.append((ri.code.file, code_pack, 0o644))
    if ri.secrets:
        files.append((SECRETS_ENV_NAME, _secrets_env(ri.secrets, secret_values), 0o600))
    return files


def _put_files(work: str) -> str:
    """Shell: unpack the tar on stdin into ``work``, every file created owner-only (umask 077: a secrets file
    is never readable by others, not for a moment) and given its own mode (-p) once written. The umask is set
    in a subshell of its own: an agent (and its job) started after it in the same exec keep the session's."""
    q = shlex.quote(work)
    return f"(umask 077 && mkdir -p {q} && tar -x -p -f - -C {q})"


def bootstrap(transport: Transport, ri: RenderInput, secret_values: Mapping[str, str], *,
              ssh_deadline_s: float = 300.0, status_deadline_s: float = 60.0,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
              code_pack: bytes | None = None, staged: bool = False, reachable: bool = False) -> BootstrapResult:
    """Upload and start. Idempotent enough to rerun: uploads overwrite, but it starts another agent,
    so callers check the status file first when re-attaching. ``code_pack``: the pinned pack's bytes when
    ``ri.code`` is set (orchestrator/runtime/codepack.py); copied as ``ri.code.file``, unpacked by the agent.
    ``staged``: ``stage`` already put this launch's files there (and SSH answered): only the start is left.
    ``reachable``: the caller has just run a command there: no wait for SSH first."""
    work = ri.resolved_work_dir
    files: bytes | None = None
    if not staged:
        if not reachable:
            wait_for_ssh(transport, ssh_deadline_s, clock, sleep)
        files = _bundle(_files(ri, secret_values, code_pack))
    status_path = _status_path(ri)
    # The files (when not staged), the start and the wait for the agent's first status (written as it starts
    # the job): one exec, one round trip.
    line = start_command(work, dict(ri.env).get("ORCH_LAUNCH_ID", ""))
    put = f"{_put_files(work)} || exit {_PUT_FAILED}; " if files is not None else ""
    # The status file's content is remembered (from the exec's own directory, before the start's cd) so that
    # the wait takes only a status the started agent wrote.
    res = transport.exec(f"{put}{_remember(status_path)}; {{ {line}; }} >/dev/null || exit {_START_FAILED}; "
                         f"{_await_here(ri.agent.status_path, status_deadline_s)}", timeout=status_deadline_s + 120,
                         stdin=files)
    if res.exit_code == _PUT_FAILED:
        raise BootstrapError(f"putting the launch's files in {work}: {text_of(res.stderr).strip()}")
    if res.exit_code == _START_FAILED:
        raise BootstrapError(f"starting the agent: {text_of(res.stderr).strip()}")
    if res.exit_code != 0:
        # The node waited the whole deadline: no read from here could tell a new status from the one before.
        raise BootstrapError(f"agent wrote no status at {status_path} within {status_deadline_s:.0f}s "
                             f"(its log: {PurePosixPath(work) / 'agent.log'})")
    try:
        return BootstrapResult(work, status_path, parse_status(res.stdout))
    except StatusFormatError:
        pass
    # A new status that is not a whole one: one more read (the agent rewrites it each round), then the error.
    try:
        return BootstrapResult(work, status_path, parse_status(transport.get(status_path)))
    except (*_NOT_READY, StatusFormatError) as exc:
        raise BootstrapError(f"agent wrote no status at {status_path} within "
                             f"{status_deadline_s:.0f}s: {exc}") from None
