"""``SshTransport``: the Transport interface over one kept-alive paramiko connection to one machine, reconnected
when it drops (until a deadline), host keys checked against a ``HostKeyStore``, files over sftp. Imports
paramiko only when used.

A command that times out is abandoned: the SSH channel is closed (the remote process is not signalled;
OpenSSH does not kill a non-pty session's process when its channel closes, so commands that may run long
should be wrapped by the caller, e.g. with ``timeout``).
"""

from __future__ import annotations

import contextlib
import select
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from providers.ssh.errors import (
    ExecTimeoutError,
    HostKeyError,
    RemotePathError,
    TransportAuthError,
    TransportUnreachableError,
)
from providers.ssh.hostkeys import HostTrust
from providers.ssh.sftp import read_file, write_privately
from providers.ssh.transport import ExecResult, content_bytes, env_prefix

if TYPE_CHECKING:
    import paramiko

    from providers.ssh.hostkeys import HostKeyStore


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

        full = env_prefix(env) + (f"cd {shlex.quote(self.workdir)} && " if self.workdir else "") + cmd
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
        data = content_bytes(src)
        dest = PurePosixPath(self._remote(remote_path))
        self._sftp_call(f"put {dest}", lambda sftp: write_privately(sftp, dest, data, mode))

    def get(self, remote_path: str) -> bytes:
        path = self._remote(remote_path)
        data = self._sftp_call(f"get {path}", lambda sftp: read_file(sftp, path))
        assert data is not None
        return data

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> SshTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

