"""A warm Python that forks real processes for the tests that run ``python -m <module> ...`` many times.

Each ``python -m orchestrator tick`` pays the interpreter's start and orch's imports (about 1-2 s of CPU on
the project's 2-core machine) before it does a tick's few hundred milliseconds of work; the crash-safety files
start dozens. The server here is one fresh interpreter (started with ``python -m tests.support.forkserver``, so
it has no threads and no open sockets or databases) that imports what the children import and then, per
request, forks a child that becomes ``python -m <module> <args>``: its own process, environment, working
directory, stdin/stdout/stderr files, exit status and death (a crash point's SIGKILL kills the child, never the
server). What it does not test is the interpreter's start itself; the files that use it keep true subprocess
runs for that (e.g. tests/test_cli_jobs.py's follower and the CLI smoke tests).

Protocol (one JSON object per line; requests on the server's stdin, replies on its stdout): a request
``{"module", "args", "env", "cwd", "stdin", "stdout", "stderr"}`` (paths; stdin may be null for /dev/null) is
answered ``{"pid": n}`` once forked and ``{"returncode": rc}`` when the child is gone (``-N``: killed by signal
N, as ``subprocess`` reports it). A child that exits normally writes the names of the modules it imported to
``<stdout>.modules``; the server imports those of the families in ``_WARM`` before the next fork, so later
children start warm (``python -m tests.support.forkserver MODULE...`` imports those first, while the test sets
up).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: Module families the server may import on its children's behalf: pure-Python libraries that start no thread
#: and open nothing at import. A child imports anything else itself.
_WARM = ("orchestrator", "providers", "sqlalchemy", "alembic", "mako", "httpx", "httpcore", "h11", "anyio",
         "sniffio", "idna", "certifi", "pydantic", "pydantic_core", "annotated_types", "typing_extensions",
         "yaml", "typer", "click", "rich", "pygments", "markdown_it", "mdurl", "shellingham", "platformdirs",
         "psycopg", "psycopg_pool", "sqlmodel", "paramiko", "cryptography", "bcrypt", "nacl", "invoke",
         "prometheus_client", "jsonschema", "referencing", "rpds", "attr", "attrs", "trio", "outcome",
         "sortedcontainers")


def _warm(names: Sequence[str], running: str) -> None:
    for name in names:
        # ``running`` itself is not imported: runpy would warn that it was found in sys.modules.
        if name in sys.modules or name == running or name.endswith("__main__") or name.split(".")[0] not in _WARM:
            continue
        try:
            importlib.import_module(name)
        except Exception:           # a module that does not import here is the child's to import
            pass


def _child(job: dict[str, object], channel: tuple[IO[bytes], IO[str]]) -> None:
    """Becomes ``python -m module args``; leaves by SystemExit (or an exception) through the interpreter's
    normal exit: atexit handlers, non-daemon threads joined, stdio flushed."""
    for end in channel:
        end.close()
    os.chdir(str(job["cwd"]))
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in dict(job["env"]).items()})  # type: ignore[call-overload]
    files = ((0, job["stdin"] or os.devnull, os.O_RDONLY),
             (1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
             (2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
    for fd, path, flags in files:
        opened = os.open(str(path), flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    modules_file = f"{job['stdout']}.modules"
    sys.argv = [str(job["module"]), *[str(a) for a in job["args"]]]  # type: ignore[attr-defined]
    try:
        runpy.run_module(str(job["module"]), run_name="__main__", alter_sys=True)
    except SystemExit as done:
        if done.code in (0, None):
            Path(modules_file).write_text("\n".join(sorted(sys.modules)))
        raise
    Path(modules_file).write_text("\n".join(sorted(sys.modules)))
    sys.exit(0)


def serve() -> None:
    # The channel leaves fds 0 and 1, which each child points at its own files.
    requests, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    _warm(sys.argv[1:], "")        # while the test sets up its world
    with os.fdopen(requests, "rb", buffering=0) as req, os.fdopen(replies, "w") as rep:
        buffered = b""
        while True:
            while b"\n" not in buffered:
                chunk = req.read(65536)
                if not chunk:
                    return
                buffered += chunk
            line, buffered = buffered.split(b"\n", 1)
            job = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            # The server's objects move to the collector's permanent generation: a child's collections then
            # skip them instead of walking (and copying, page by page) the whole warm heap. Measured on
            # `orch fit` with the conftest's warm set: 0.75 s CPU per child before, 0.36 s after (cold: 0.43 s).
            gc.freeze()
            pid = os.fork()
            if pid == 0:
                _child(job, (req, rep))
            rep.write(json.dumps({"pid": pid}) + "\n")
            rep.flush()
            _, status = os.waitpid(pid, 0)
            rep.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
            rep.flush()
            modules = Path(f"{job['stdout']}.modules")
            if modules.exists():
                _warm(modules.read_text().split(), str(job["module"]))


# -- the test side ---------------------------------------------------------------------------------------------

@dataclass
class ForkServer:
    """The client: ``run`` is ``subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
    text=True)`` with the child forked by the server. One request at a time (a lock), so a run that must
    overlap another process starts a true subprocess instead."""

    proc: subprocess.Popen[bytes]
    scratch: Path

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._n = 0

    def run(self, module: str, args: Sequence[str], *, env: dict[str, str], cwd: Path,
            timeout: float = 120, stdin: Path | None = None) -> subprocess.CompletedProcess[str]:
        with self._lock:
            self._n += 1
            out, err = self.scratch / f"{self._n}.out", self.scratch / f"{self._n}.err"
            job = {"module": module, "args": list(args), "env": env, "cwd": str(cwd), "stdout": str(out),
                   "stderr": str(err), "stdin": str(stdin) if stdin else None}
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
            pid = int(json.loads(self.proc.stdout.readline())["pid"])
            done, expired = threading.Event(), threading.Event()

            def kill_late() -> None:
                if not done.wait(timeout):
                    expired.set()
                    os.kill(pid, signal.SIGKILL)

            threading.Thread(target=kill_late, daemon=True).start()
            reply = self.proc.stdout.readline()
            done.set()
            if not reply:
                raise RuntimeError(f"the fork server died: {self.proc.poll()}")
            rc = int(json.loads(reply)["returncode"])
            argv = [sys.executable, "-m", module, *args]
            if expired.is_set():
                raise subprocess.TimeoutExpired(argv, timeout)
            return subprocess.CompletedProcess(argv, rc, out.read_text(), err.read_text())

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def start(scratch: Path, cwd: Path, env: dict[str, str], warm: Sequence[str] = ()) -> ForkServer:
    scratch.mkdir(parents=True, exist_ok=True)
    log = (scratch / "server.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.forkserver", *warm], cwd=cwd, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
    log.close()
    return ForkServer(proc, scratch)


def started(scratch: Path, cwd: Path, env: dict[str, str], warm: Sequence[str] = ()) -> Iterator[ForkServer]:
    server = start(scratch, cwd, env, warm)
    try:
        yield server
    finally:
        server.close()


if __name__ == "__main__":
    serve()
