"""Reaching a machine: run commands, copy files. One interface, two implementations.

* ``SshTransport`` (providers.ssh.connection): paramiko, ONE kept-alive connection per machine, reconnected
  transparently when it drops (until a deadline), sftp for files, host keys checked against a ``HostKeyStore``.
* ``LocalTransport`` (providers.ssh.local): the same interface over subprocess in a working directory (tests,
  localhost).

This module holds the interface (``Transport``, ``ExecResult``) and the helpers both implementations share.
Every call has a timeout. Errors are ``providers.ssh.errors.TransportError`` subclasses, never paramiko's.

A command that times out is abandoned: the SSH channel is closed (the remote process is not signalled;
OpenSSH does not kill a non-pty session's process when its channel closes, so commands that may run long
should be wrapped by the caller, e.g. with ``timeout``). Locally the whole process group is killed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@runtime_checkable
class Transport(Protocol):
    """What the orchestrator needs from a machine. Relative remote paths are relative to the working dir."""

    def exec(
        self, cmd: str, timeout: float, env: Mapping[str, str] | None = None, stdin: bytes | str | None = None
    ) -> ExecResult:
        """Run ``cmd`` through the POSIX shell; return its exit code and output. Raise ExecTimeoutError
        when it runs past ``timeout`` seconds, TransportError when the machine cannot be reached."""
        ...

    def put(self, src: Path | bytes | str, remote_path: str, mode: int | None = None) -> None:
        """Write a local file (Path) or content (bytes/str) to ``remote_path`` atomically, parents created."""
        ...

    def get(self, remote_path: str) -> bytes:
        """Read a remote file; RemotePathError when it is missing or unreadable."""
        ...

    def close(self) -> None: ...


def check_env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    for name in env or {}:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"invalid environment variable name {name!r}")
    return env or {}


def env_prefix(env: Mapping[str, str] | None) -> str:
    # SSH "env" requests are refused unless the server's AcceptEnv lists the name: export in the shell instead.
    parts = []
    for name, value in check_env(env).items():
        parts.append(f"export {name}={shlex.quote(value)}; ")
    return "".join(parts)


def content_bytes(src: Path | bytes | str) -> bytes:
    if isinstance(src, Path):
        return src.read_bytes()
    return src.encode() if isinstance(src, str) else src
