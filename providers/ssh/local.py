"""``LocalTransport``: the Transport interface over subprocess in a working directory (tests, localhost). A
command that times out has its whole process group killed; files are written atomically, owner-only until
their content is in."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path

from providers.ssh.errors import ExecTimeoutError, RemotePathError
from providers.ssh.transport import ExecResult, check_env, content_bytes


class LocalTransport:
    """Runs commands with ``/bin/sh -c`` in ``root``; files relative to ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, remote_path: str) -> Path:
        p = Path(remote_path)
        return p if p.is_absolute() else self.root / p

    def exec(
        self, cmd: str, timeout: float, env: Mapping[str, str] | None = None, stdin: bytes | str | None = None
    ) -> ExecResult:
        full_env = {**os.environ, **check_env(env)}
        data = stdin.encode() if isinstance(stdin, str) else stdin
        proc = subprocess.Popen(
            ["/bin/sh", "-c", cmd], cwd=self.root, env=full_env, start_new_session=True,
            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        try:
            out, err = proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise ExecTimeoutError(f"command timed out after {timeout}s: {cmd}", endpoint="local") from None
        return ExecResult(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))

    def put(self, src: Path | bytes | str, remote_path: str, mode: int | None = None) -> None:
        dest = self._path(remote_path)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.orch-{uuid.uuid4().hex[:8]}")
            # Created owner-only (O_EXCL, mode 0600), so a secrets file is never readable by others, not
            # even for a moment; widened to ``mode`` (a script's 0755) only once its content is written.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                         0o600 if mode is not None else 0o666)
            with os.fdopen(fd, "wb") as fh:
                fh.write(content_bytes(src))
                if mode is not None:
                    os.fchmod(fh.fileno(), mode)
            os.replace(tmp, dest)
        except OSError as exc:
            raise RemotePathError(f"cannot write {remote_path}: {exc}", endpoint="local") from exc

    def get(self, remote_path: str) -> bytes:
        try:
            return self._path(remote_path).read_bytes()
        except OSError as exc:
            raise RemotePathError(f"cannot read {remote_path}: {exc}", endpoint="local") from exc

    def close(self) -> None:
        return None
