"""A REAL OpenSSH server on 127.0.0.1 for tests: one ``Sshd`` is one "machine".

Each server gets a free port, a fresh ed25519 host key and client key, its own authorized_keys, a bin
dir on the session PATH (``SetEnv PATH``) holding a fake ``nvidia-smi``, and a working root (``workdir``,
also exported to sessions as ``ORCH_MACHINE_ROOT``). Several servers make several machines.

The fake ``nvidia-smi`` prints state files the test rewrites between polls (``set_gpus``), for ``-L`` and
``--query-gpu=index,utilization.gpu,memory.used,memory.total,power.draw --format=csv,noheader,nounits``;
``fail_nvidia_smi`` makes it exit non-zero; every call is appended to ``nvidia_smi_calls``.

Use the fixtures ``sshd`` (one machine) and ``sshd_factory`` (call it for each machine) by importing
them into a test module, or ``Sshd(root).start()`` / ``with Sshd(root):`` directly. Tests skip only when
/usr/sbin/sshd is missing. ``stop`` kills the listener and every session process it spawned.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import hashlib
import os
import shlex
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
QUERY_FIELDS = "index,utilization.gpu,memory.used,memory.total,power.draw"


def require_sshd() -> None:
    if not SSHD.exists():
        pytest.skip(f"{SSHD} is not installed (apt-get install openssh-server) - real-SSH tests need it")


@dataclass(frozen=True, slots=True)
class FakeGpu:
    """One GPU as the fake nvidia-smi reports it."""

    index: int = 0
    name: str = "NVIDIA A100-SXM4-80GB"
    utilization: int = 0
    memory_used_mib: int = 0
    memory_total_mib: int = 81920
    power_w: float = 60.0

    @property
    def uuid(self) -> str:
        return f"GPU-{hashlib.md5(f'{self.name}-{self.index}'.encode()).hexdigest()[:8]}-fake"

    @property
    def list_line(self) -> str:
        return f"GPU {self.index}: {self.name} (UUID: {self.uuid})"

    @property
    def query_line(self) -> str:
        return f"{self.index}, {self.utilization}, {self.memory_used_mib}, {self.memory_total_mib}, {self.power_w:.2f}"


def generate_ed25519(path: Path, comment: str = "orch-test") -> str:
    """Write an OpenSSH ed25519 private key to ``path`` (0600) and ``path.pub``; return the public line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    line = f"{public.decode()} {comment}"
    path.with_name(path.name + ".pub").write_text(line + "\n")
    return line


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_TCP_LISTEN = "0A"  # the LISTEN state in /proc/net/tcp


def listening_sockets(host: str, port: int) -> set[int]:
    """The inodes of the sockets in LISTEN state on host:port (IPv4), from /proc/net/tcp."""
    local = f"{struct.unpack('=I', socket.inet_aton(host))[0]:08X}:{port:04X}"
    found: set[int] = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == local and fields[3] == _TCP_LISTEN:
            found.add(int(fields[9]))
    return found


def _socket_inodes(pid: int) -> set[int]:
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return set()
    inodes: set[int] = set()
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"{fd_dir}/{fd}")
            if target.startswith("socket:["):
                inodes.add(int(target[len("socket:["):-1]))
    return inodes


def listens(pid: int, host: str, port: int) -> bool:
    """Whether process ``pid`` ITSELF holds a socket listening on host:port.

    This, not a connection that succeeds, is when a (re)started sshd is ready: sshd loads its host key before it
    listens, and a connection proves only that SOME socket listens there. After a stop the old server's socket
    can outlive it (see ``Sshd.stop``), and a probe that connects spawns a child of the server it reaches.
    """
    return bool(listening_sockets(host, port) & _socket_inodes(pid))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def _descendants(pid: int) -> list[int]:
    tree = _children_map()
    found: list[int] = []
    stack = list(tree.get(pid, []))
    while stack:
        p = stack.pop()
        found.append(p)
        stack.extend(tree.get(p, []))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def _wait_gone(pids: Sequence[int], deadline_s: float = 5.0) -> None:
    end = time.monotonic() + deadline_s
    while any(_alive(p) for p in pids):
        if time.monotonic() > end:
            for p in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            return
        time.sleep(0.01)


_FAKE_NVIDIA_SMI = """#!/bin/sh
# Fake nvidia-smi written by tests/support/sshd.py: prints the state files the test rewrites.
STATE={state}
echo "$*" >> "$STATE/calls"
if [ -f "$STATE/fail" ]; then cat "$STATE/fail" >&2; exit 9; fi
query=""; fmt=""
for a in "$@"; do
  case "$a" in
    -L|--list-gpus) cat "$STATE/list"; exit 0;;
    --query-gpu=*) query="${{a#--query-gpu=}}";;
    --format=*) fmt="${{a#--format=}}";;
  esac
done
if [ "$query" = "{fields}" ] && [ "$fmt" = "csv,noheader,nounits" ]; then
  cat "$STATE/query.csv"; exit 0
fi
if [ "$#" -eq 0 ]; then cat "$STATE/list"; exit 0; fi
echo "fake nvidia-smi: unsupported arguments: $*" >&2
exit 2
"""


class Sshd:
    """One real sshd on 127.0.0.1 (a "machine"). ``start`` returns self; ``stop`` leaves no process."""

    host = "127.0.0.1"

    def __init__(self, root: Path, *, port: int | None = None, gpus: Sequence[FakeGpu] = (FakeGpu(),)) -> None:
        self.root = Path(root)
        self.port = port or free_port()
        self.user = getpass.getuser()
        self.etc = self.root / "etc"
        self.bin_dir = self.root / "bin"
        self.state_dir = self.root / "gpu-state"
        self.workdir = self.root / "machine"
        for d in (self.etc, self.bin_dir, self.state_dir, self.workdir):
            d.mkdir(parents=True, exist_ok=True)
        self.client_key_path = self.etc / "client_ed25519"
        self.client_public_key = generate_ed25519(self.client_key_path, "orch-test-client")
        self.authorized_keys = self.etc / "authorized_keys"
        self.authorize_client_key()
        self.host_key_path = self.etc / "host_ed25519"
        generate_ed25519(self.host_key_path, "orch-test-host")
        self.log_path = self.root / "sshd.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self.nvidia_smi = self.write_command(
            "nvidia-smi", _FAKE_NVIDIA_SMI.format(state=shlex.quote(str(self.state_dir)), fields=QUERY_FIELDS)
        )
        self.set_gpus(gpus)

    # -- what tests read -----------------------------------------------------------------------------
    @property
    def host_key_line(self) -> str:
        """``ssh-ed25519 AAAA...`` (no comment), as a provider API or config would give it."""
        parts = self.host_key_path.with_name(self.host_key_path.name + ".pub").read_text().split()
        return f"{parts[0]} {parts[1]}"

    @property
    def host_fingerprint(self) -> str:
        blob = base64.b64decode(self.host_key_line.split()[1])
        return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def nvidia_smi_calls(self) -> list[str]:
        calls = self.state_dir / "calls"
        return calls.read_text().splitlines() if calls.exists() else []

    # -- what tests change ---------------------------------------------------------------------------
    def set_gpus(self, gpus: Sequence[FakeGpu]) -> None:
        _write_atomic(self.state_dir / "list", "".join(g.list_line + "\n" for g in gpus))
        _write_atomic(self.state_dir / "query.csv", "".join(g.query_line + "\n" for g in gpus))

    def fail_nvidia_smi(self, message: str | None = "NVIDIA-SMI has failed because it couldn't communicate "
                        "with the NVIDIA driver.") -> None:
        """Make the fake exit 9 with ``message`` on stderr; None restores it."""
        fail = self.state_dir / "fail"
        if message is None:
            fail.unlink(missing_ok=True)
        else:
            _write_atomic(fail, message + "\n")

    def write_command(self, name: str, script: str) -> Path:
        """Drop an executable into the session PATH (a stand-in for a tool the machine would have)."""
        path = self.bin_dir / name
        _write_atomic(path, script)
        path.chmod(0o755)
        return path

    def authorize_client_key(self) -> None:
        _write_atomic(self.authorized_keys, self.client_public_key + "\n")

    def revoke_client_key(self) -> None:
        """The server now refuses our client key (authentication fails)."""
        _write_atomic(self.authorized_keys, "")

    def rotate_host_key(self) -> str:
        """A new host key, served after the next (re)start; returns the new public line."""
        generate_ed25519(self.host_key_path, "orch-test-host")
        return self.host_key_line

    # -- lifecycle -----------------------------------------------------------------------------------
    def _config(self) -> Path:
        cfg = self.etc / "sshd_config"
        cfg.write_text(
            "\n".join([
                "ListenAddress 127.0.0.1",
                f"Port {self.port}",
                f"HostKey {self.host_key_path}",
                f"PidFile {self.root / 'sshd.pid'}",
                f"AuthorizedKeysFile {self.authorized_keys}",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "PermitRootLogin prohibit-password",
                "UseDNS no",
                "PrintMotd no",
                # SHLVL=1: bash sources the user's ~/.bashrc for a command sshd runs only as a top-level shell
                # (SHLVL<2). The host user's rc is not the machine's: here it ran `pyenv init` on every exec
                # (~0.3 s each) and put pyenv's shims before this PATH (python3 was not /usr/bin/python3).
                f"SetEnv PATH={self.bin_dir}:{_SYSTEM_PATH} ORCH_MACHINE_ROOT={self.workdir} SHLVL=1",
                "Subsystem sftp internal-sftp",
                "LogLevel ERROR",
            ]) + "\n"
        )
        return cfg

    def start(self, deadline_s: float = 60.0) -> Sshd:
        require_sshd()
        if self.running:
            return self
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
        cfg = self._config()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed after Popen
        try:
            self._proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(cfg)], stdout=log, stderr=log,
                                          stdin=subprocess.DEVNULL)
        finally:
            log.close()
        end = time.monotonic() + deadline_s
        while True:
            if self._proc.poll() is not None:
                self._proc = None
                raise RuntimeError(f"sshd exited at start: {self.log_path.read_text()[-2000:]}")
            if listens(self._proc.pid, self.host, self.port):
                return self
            if time.monotonic() > end:
                self.stop()
                raise RuntimeError(f"sshd did not listen on {self.port} within {deadline_s}s")
            time.sleep(0.01)

    def drop_connections(self) -> None:
        """Kill every session process (the server side of each connection); the listener stays up."""
        if self._proc is None:
            return
        victims = _descendants(self._proc.pid)
        for p in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGTERM)
        _wait_gone(victims)

    def stop(self, deadline_s: float = 60.0) -> None:
        """Stop the listener and its sessions; return once nothing listens on the port any more.

        sshd forks a child for each connection it accepts, and the child holds a copy of the listening socket
        until it closes it, just after the fork. A connection the listener accepts as it is told to stop (on a
        loaded machine, one made well before) leaves such a child behind it, still listening: a restart then
        either cannot bind the port or is taken as ready while clients reach the old server's socket, which is
        closed under them (a test saw "cannot connect" right after ``restart``).
        """
        if self._proc is None:
            return
        self.drop_connections()  # first, so the listener reaps its session children
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        end = time.monotonic() + deadline_s
        while listening_sockets(self.host, self.port):
            if time.monotonic() > end:
                raise RuntimeError(f"port {self.port} still listened on {deadline_s}s after sshd exited")
            time.sleep(0.01)

    def restart(self, *, new_host_key: bool = False) -> Sshd:
        """Stop (dropping connections) and start again on the same port, optionally with a new host key."""
        self.stop()
        if new_host_key:
            self.rotate_host_key()
        return self.start()

    def __enter__(self) -> Sshd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def sshd_servers(count: int, base: Path | None = None) -> Iterator[list[Sshd]]:
    """``count`` machines, each with its own root under ``base`` (a temp dir when None)."""
    with contextlib.ExitStack() as stack:
        if base is None:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="orch-sshd-")))
        servers = [stack.enter_context(Sshd(base / f"machine{i}")) for i in range(count)]
        yield servers


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    """One real sshd (a machine) for the test."""
    require_sshd()
    with Sshd(tmp_path / "sshd") as server:
        yield server


@pytest.fixture
def sshd_factory(tmp_path: Path) -> Iterator[Callable[[], Sshd]]:
    """Call it for each machine the test needs; all are stopped at teardown."""
    require_sshd()
    started: list[Sshd] = []

    def make() -> Sshd:
        server = Sshd(tmp_path / f"sshd{len(started)}").start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
