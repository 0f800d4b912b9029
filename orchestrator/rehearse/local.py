"""This machine as a node: a Transport that runs commands here, a cloud metadata server on 127.0.0.1 that
raises a preemption notice when told, and process-tree control (freeze, thaw, hard kill) through /proc.

Linux only (``/proc``), like the agent it drives.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: The GCP metadata path the agent polls for a preemption (docs/runtime.md, "Preemption notices").
GCP_PREEMPTED_PATH = "/computeMetadata/v1/instance/preempted"
GCP_MAINTENANCE_PATH = "/computeMetadata/v1/instance/maintenance-event"


@dataclass(frozen=True, slots=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str


class LocalTransport:
    """``bootstrap``'s Transport on this machine: commands run in ``home`` under bash, files land under it.

    The job sees this process's environment minus orch's own ``ORCH_*`` variables, with the Python that runs
    orch first on PATH (so ``torchrun``/``python3`` are the ones of orch's environment)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
        self.env = env

    def _path(self, remote: str) -> Path:
        return Path(remote) if remote.startswith("/") else self.home / remote

    def exec(self, cmd: str, timeout: float, *, stdin: bytes | None = None) -> ExecResult:
        # Output goes to files, not pipes: the agent's start command backgrounds a subshell that keeps its
        # inherited stdout open for the agent's whole life, so reading a pipe to EOF would wait for the job.
        # ``stdin`` (the launch's files as a tar) comes from a file too, for the same reason.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as inp:
            inp.write(stdin or b"")
            inp.seek(0)
            proc = subprocess.Popen(["bash", "-c", cmd], cwd=self.home, stdout=out, stderr=err,
                                    stdin=inp if stdin is not None else subprocess.DEVNULL, env=self.env)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
            out.seek(0)
            err.seek(0)
            return ExecResult(code, out.read().decode(errors="replace"), err.read().decode(errors="replace"))

    def put(self, data_or_path: bytes | str, remote_path: str, mode: int) -> None:
        data = data_or_path if isinstance(data_or_path, bytes) else Path(data_or_path).read_bytes()
        path = self._path(remote_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)

    def get(self, remote_path: str) -> bytes:
        return self._path(remote_path).read_bytes()


class NoticeServer:
    """GCP's metadata answer to "am I preempted?" on 127.0.0.1: ``FALSE`` until ``raise_notice``, then
    ``TRUE``. Requests without ``Metadata-Flavor: Google`` get 403, as on GCP."""

    def __init__(self) -> None:
        self.preempted = threading.Event()
        self.polls = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.split("?")[0] == GCP_MAINTENANCE_PATH and self.headers.get("Metadata-Flavor") == "Google":
                    self._send(200, "NONE")    # the agent polls it too; a rehearsal never has a maintenance event
                elif self.path.split("?")[0] != GCP_PREEMPTED_PATH:
                    self._send(404, "not found")
                elif self.headers.get("Metadata-Flavor") != "Google":
                    self._send(403, "missing Metadata-Flavor: Google")
                else:
                    server.polls += 1
                    self._send(200, "TRUE" if server.preempted.is_set() else "FALSE")

            def _send(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="orch-rehearse-metadata",
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def raise_notice(self) -> None:
        self.preempted.set()

    def __enter__(self) -> NoticeServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants, parents first (from /proc; launchers put ranks in new sessions, so
    process groups do not reach them)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, queue = [], [root]
    while queue:
        pid = queue.pop(0)
        tree.append(pid)
        queue.extend(sorted(children.get(pid, [])))
    return tree


def _signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def freeze(root: int) -> list[int]:
    """SIGSTOP ``root``'s whole tree, asking again until no new process appears (a stopped process cannot
    fork, so the second listing is complete). Returns the frozen pids."""
    frozen: list[int] = []
    while True:
        fresh = [p for p in process_tree(root) if p not in frozen]
        if not fresh:
            return frozen
        _signal_all(fresh, signal.SIGSTOP)
        frozen += fresh


def thaw(pids: Iterable[int]) -> None:
    _signal_all(pids, signal.SIGCONT)


def hard_kill(root: int) -> None:
    """The machine vanishing: freeze the tree (nothing forks or writes any more), then SIGKILL all of it."""
    _signal_all(freeze(root), signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
