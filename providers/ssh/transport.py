"""Reaching a machine: run commands, copy files. One interface, two implementations.

* ``SshTransport``: paramiko, ONE kept-alive connection per machine, reconnected transparently when it
  drops (until a deadline), sftp for files, host keys checked against a ``HostKeyStore``.
* ``LocalTransport``: the same interface over subprocess in a working directory (tests, localhost).

Every call has a timeout. Errors are ``providers.ssh.errors.TransportError`` subclasses, never paramiko's.

A command that times out is abandoned: the SSH channel is closed (the remote process is not signalled;
OpenSSH does not kill a non-pty session's process when its channel closes, so commands that may run long
should be wrapped by the caller, e.g. with ``timeout``). Locally the whole process group is killed.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from providers.ssh.errors import (
    ExecTimeoutError,
    HostKeyError,
    HostKeyMismatchError,
    RemotePathError,
    TransportAuthError,
    TransportError,
    TransportUnreachableError,
    UnknownHostKeyError,
)
from providers.ssh.hostkeys import HostTrust

if TYPE_CHECKING:
    import paramiko

    from providers.ssh.hostkeys import HostKeyStore

__all__ = [
    "ExecResult",
    "ExecTimeoutError",
    "HostKeyError",
    "HostKeyMismatchError",
    "LocalTransport",
    "RemotePathError",
    "SshTransport",
    "Transport",
    "TransportAuthError",
    "TransportError",
    "TransportUnreachableError",
    "UnknownHostKeyError",
]

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


def _check_env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    for name in env or {}:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"invalid environment variable name {name!r}")
    return env or {}


def _env_prefix(env: Mapping[str, str] | None) -> str:
    # SSH "env" requests are refused unless the server's AcceptEnv lists the name: export in the shell instead.
    parts = []
    for name, value in _check_env(env).items():
        parts.append(f"export {name}={shlex.quote(value)}; ")
    return "".join(parts)


def _content(src: Path | bytes | str) -> bytes:
    if isinstance(src, Path):
        return src.read_bytes()
    return src.encode() if isinstance(src, str) else src


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
        full_env = {**os.environ, **_check_env(env)}
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
                fh.write(_content(src))
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


class SshTransport:
    """One kept-alive paramiko connection to one machine.

    Connect: TCP ``connect_timeout``, then banner/auth timeouts; the server's host key is verified by
    ``host_keys`` under ``trust`` (see providers.ssh.hostkeys) before authentication. When the connection
    has dropped, the next call reconnects, retrying with backoff until ``reconnect_deadline_s``, then raises
    TransportUnreachableError. Host key and authentication refusals are raised at once, never retried.
    A command is never re-sent once its channel was opened (it may have run); only opening is retried.

    ``workdir`` (optional) is where commands run and relative paths point; default the login directory.
    ``connect_count`` counts successful connections (for tests and metrics).
    """

    def __init__(
        self,
        host: str,
        port: int = 22,
        user: str = "root",
        *,
        key_path: Path | str | None = None,
        pkey: paramiko.PKey | None = None,
        host_keys: HostKeyStore,
        trust: HostTrust | None = None,
        connect_timeout: float = 10.0,
        auth_timeout: float = 15.0,
        banner_timeout: float = 15.0,
        keepalive_s: float = 15.0,
        reconnect_deadline_s: float = 30.0,
        workdir: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if key_path is None and pkey is None:
            raise ValueError("SshTransport needs key_path or pkey")
        self.host = host
        self.port = port
        self.user = user
        self.key_path = Path(key_path).expanduser() if key_path is not None else None
        self._pkey = pkey
        self.host_keys = host_keys
        self.trust = trust or HostTrust()
        self.connect_timeout = connect_timeout
        self.auth_timeout = auth_timeout
        self.banner_timeout = banner_timeout
        self.keepalive_s = keepalive_s
        self.reconnect_deadline_s = reconnect_deadline_s
        self.workdir = workdir
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.RLock()
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self.connect_count = 0

    @property
    def endpoint(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    # -- connection ----------------------------------------------------------------------------------
    def _load_key(self) -> paramiko.PKey:
        import paramiko

        if self._pkey is None:
            assert self.key_path is not None
            try:
                self._pkey = paramiko.PKey.from_path(self.key_path)
            except (OSError, paramiko.SSHException, ValueError) as exc:
                raise TransportAuthError(f"cannot load client key {self.key_path}: {exc}",
                                         endpoint=self.endpoint) from exc
        return self._pkey

    def _connect_once(self) -> paramiko.SSHClient:
        import paramiko

        client = paramiko.SSHClient()
        # No host keys of its own: every server key goes to the store's policy (see HostKeyStore.policy).
        client.set_missing_host_key_policy(self.host_keys.policy(self.host, self.port, self.trust))
        try:
            client.connect(
                self.host, self.port, username=self.user, pkey=self._load_key(),
                timeout=self.connect_timeout, banner_timeout=self.banner_timeout, auth_timeout=self.auth_timeout,
                channel_timeout=self.connect_timeout, allow_agent=False, look_for_keys=False,
            )
        except HostKeyError:
            client.close()
            raise
        except paramiko.AuthenticationException as exc:
            client.close()
            raise TransportAuthError(f"authentication refused for key {self.key_path or 'pkey'}: {exc}",
                                     endpoint=self.endpoint) from exc
        except (OSError, EOFError, paramiko.SSHException) as exc:
            client.close()
            raise TransportUnreachableError(f"cannot connect: {exc or type(exc).__name__}",
                                            endpoint=self.endpoint) from exc
        transport = client.get_transport()
        if transport is not None and self.keepalive_s > 0:
            transport.set_keepalive(max(1, round(self.keepalive_s)))
        self.connect_count += 1
        return client

    def _connected(self) -> paramiko.SSHClient:
        with self._lock:
            client = self._client
            transport = client.get_transport() if client is not None else None
            if client is not None and transport is not None and transport.is_active():
                return client
            self._drop()
            deadline = self._clock() + self.reconnect_deadline_s
            wait = 0.05
            while True:
                try:
                    self._client = self._connect_once()
                    return self._client
                except TransportUnreachableError:
                    if self._clock() + wait > deadline:
                        raise
                self._sleep(wait)
                wait = min(wait * 2, 2.0)

    def _drop(self) -> None:
        with self._lock:
            if self._sftp is not None:
                with contextlib.suppress(Exception):
                    self._sftp.close()
            if self._client is not None:
                with contextlib.suppress(Exception):
                    self._client.close()
            self._sftp = None
            self._client = None

    def connect(self) -> None:
        """Connect now (verifying the host key) instead of on first use."""
        self._connected()

    def _open_session(self) -> paramiko.Channel:
        import paramiko

        for attempt in range(2):
            client = self._connected()
            transport = client.get_transport()
            try:
                if transport is None:
                    raise EOFError("no transport")
                return transport.open_session(timeout=self.connect_timeout)
            except (OSError, EOFError, paramiko.SSHException) as exc:
                # The connection died under us (server restart, network drop): nothing was sent yet.
                self._drop()
                if attempt:
                    raise TransportUnreachableError(f"cannot open a session: {exc}", endpoint=self.endpoint) from exc
        raise AssertionError("unreachable")

    def _sftp_client(self) -> paramiko.SFTPClient:
        import paramiko

        with self._lock:
            for attempt in range(2):
                client = self._connected()
                if self._sftp is not None:
                    return self._sftp
                try:
                    self._sftp = client.open_sftp()
                    channel = self._sftp.get_channel()
                    if channel is not None:
                        channel.settimeout(max(self.connect_timeout, 30.0))
                    return self._sftp
                except (OSError, EOFError, paramiko.SSHException) as exc:
                    self._drop()
                    if attempt:
                        raise TransportUnreachableError(f"cannot open sftp: {exc}", endpoint=self.endpoint) from exc
            raise AssertionError("unreachable")

    # -- operations ----------------------------------------------------------------------------------
    def _remote(self, remote_path: str) -> str:
        if self.workdir and not remote_path.startswith("/"):
            return str(PurePosixPath(self.workdir) / remote_path)
        return remote_path

    def exec(
        self, cmd: str, timeout: float, env: Mapping[str, str] | None = None, stdin: bytes | str | None = None
    ) -> ExecResult:
        import paramiko

        full = _env_prefix(env) + (f"cd {shlex.quote(self.workdir)} && " if self.workdir else "") + cmd
        chan = self._open_session()
        deadline = self._clock() + timeout
        out, err = bytearray(), bytearray()
        try:
            chan.exec_command(full)
            if stdin is not None:
                chan.sendall(stdin.encode() if isinstance(stdin, str) else stdin)
            chan.shutdown_write()
            while True:
                if chan.recv_ready():
                    out += chan.recv(65536)
                    continue
                if chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                    continue
                if chan.exit_status_ready():
                    # OpenSSH sends data and EOF before exit-status, so the buffers hold everything now.
                    break
                if chan.closed or chan.get_transport() is None or not chan.get_transport().is_active():
                    self._drop()
                    raise TransportUnreachableError(f"connection lost while running: {cmd}", endpoint=self.endpoint)
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise ExecTimeoutError(f"command timed out after {timeout}s: {cmd}", endpoint=self.endpoint)
                select.select([chan], [], [], min(remaining, 0.2))
            while chan.recv_ready():
                out += chan.recv(65536)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            code = chan.recv_exit_status()
        except (OSError, EOFError, paramiko.SSHException) as exc:
            self._drop()
            raise TransportUnreachableError(f"connection lost while running {cmd!r}: {exc}",
                                            endpoint=self.endpoint) from exc
        finally:
            with contextlib.suppress(Exception):
                chan.close()
        return ExecResult(code, out.decode(errors="replace"), err.decode(errors="replace"))

    def _sftp_call(self, what: str, fn: Callable[[paramiko.SFTPClient], bytes | None]) -> bytes | None:
        import paramiko

        sftp = self._sftp_client()
        try:
            return fn(sftp)
        except FileNotFoundError as exc:
            raise RemotePathError(f"{what}: no such file", endpoint=self.endpoint) from exc
        except PermissionError as exc:
            raise RemotePathError(f"{what}: permission denied", endpoint=self.endpoint) from exc
        except (TimeoutError, EOFError, paramiko.SSHException) as exc:
            self._drop()
            raise TransportUnreachableError(f"{what}: {exc}", endpoint=self.endpoint) from exc
        except OSError as exc:
            raise RemotePathError(f"{what}: {exc}", endpoint=self.endpoint) from exc

    def put(self, src: Path | bytes | str, remote_path: str, mode: int | None = None) -> None:
        data = _content(src)
        dest = PurePosixPath(self._remote(remote_path))

        def write(sftp: paramiko.SFTPClient) -> None:
            _sftp_makedirs(sftp, dest.parent)
            # SFTP creates files with the server's umask (often 0644) and paramiko cannot pass a mode at
            # open: the file is written inside a fresh 0700 directory, given its mode there, and only then
            # renamed into place, so a secrets file is never readable by anyone else, not for a moment.
            private = dest.parent / f".orch-put-{uuid.uuid4().hex[:12]}"
            sftp.mkdir(str(private), 0o700)
            sftp.chmod(str(private), 0o700)   # servers that ignore mkdir's mode
            tmp = str(private / dest.name)
            try:
                with sftp.open(tmp, "wb") as f:
                    f.write(data)
                if mode is not None:
                    sftp.chmod(tmp, mode)
                sftp.posix_rename(tmp, str(dest))
            finally:
                with contextlib.suppress(OSError):
                    sftp.remove(tmp)
                with contextlib.suppress(OSError):
                    sftp.rmdir(str(private))

        self._sftp_call(f"put {dest}", write)

    def get(self, remote_path: str) -> bytes:
        path = self._remote(remote_path)

        def read(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(path, "rb") as f:
                f.prefetch()
                return bytes(f.read())

        data = self._sftp_call(f"get {path}", read)
        assert data is not None
        return data

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> SshTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sftp_makedirs(sftp: paramiko.SFTPClient, path: PurePosixPath) -> None:
    missing: list[PurePosixPath] = []
    p = path
    while str(p) not in ("", ".", "/"):
        try:
            sftp.stat(str(p))
            break
        except FileNotFoundError:
            missing.append(p)
            p = p.parent
    for d in reversed(missing):
        sftp.mkdir(str(d))
