"""Pinning SSH host keys: a known_hosts-format file in orch's data dir, and the rules to trust a key.

Where trust comes from, strongest first:

1. Explicit keys or fingerprints for the host (``HostTrust.keys`` / ``.fingerprints``): from the SSH
   provider's config or from a cloud API that exposes them (``Instance.host_keys``). The server must
   present one of them; the store is then updated to the key seen (explicit trust replaces the record).
2. The store: a key recorded earlier for ``host:port``. The server must present it.
3. First contact (TOFU), only when the caller allows it (a cloud instance orch has just launched): the
   key seen is recorded and enforced from then on.

Anything else is refused: an unknown key raises UnknownHostKeyError, a key different from the pinned
one raises HostKeyMismatchError naming both fingerprints. A changed key is never accepted silently.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from providers.ssh.errors import HostKeyMismatchError, UnknownHostKeyError

if TYPE_CHECKING:
    import paramiko

__all__ = ["HostKeyStore", "HostTrust", "KnownKey", "fingerprint", "host_id"]


@dataclass(frozen=True, slots=True)
class KnownKey:
    """One public host key: its type (``ssh-ed25519``) and base64 body."""

    key_type: str
    key_b64: str

    @classmethod
    def parse(cls, line: str) -> KnownKey:
        """Parse ``"ssh-ed25519 AAAA... [comment]"``; raise ValueError when it is not a key line."""
        parts = line.split()
        if len(parts) < 2:
            raise ValueError(f"not an SSH public key line: {line!r}")
        try:
            base64.b64decode(parts[1], validate=True)
        except ValueError as exc:
            raise ValueError(f"not an SSH public key line (bad base64): {line!r}") from exc
        return cls(parts[0], parts[1])

    @classmethod
    def from_pkey(cls, key: paramiko.PKey) -> KnownKey:
        return cls(key.get_name(), key.get_base64())

    @property
    def line(self) -> str:
        return f"{self.key_type} {self.key_b64}"

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key_b64)


def fingerprint(key_b64: str) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint (unpadded base64 of the key blob's SHA-256)."""
    digest = hashlib.sha256(base64.b64decode(key_b64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def normalize_fingerprint(fp: str) -> str:
    fp = fp.strip()
    if not fp.startswith("SHA256:"):
        raise ValueError(f"host key fingerprint {fp!r} must look like 'SHA256:...' (ssh-keygen -lf)")
    return fp.rstrip("=")


def host_id(host: str, port: int) -> str:
    """The host field known_hosts uses: ``host`` on port 22, else ``[host]:port``."""
    return host if port == 22 else f"[{host}]:{port}"


@dataclass(frozen=True, slots=True)
class HostTrust:
    """What a caller knows about one host's key before connecting (see the module docstring)."""

    keys: tuple[str, ...] = ()
    fingerprints: tuple[str, ...] = ()
    allow_first_contact: bool = False

    @property
    def explicit(self) -> bool:
        return bool(self.keys or self.fingerprints)


class HostKeyStore:
    """A known_hosts file orch owns. Safe across threads and processes (flock + atomic replace).

    Only plain (unhashed) host fields are read; markers (``@cert-authority``) are ignored.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._thread_lock = threading.Lock()

    # -- reading -------------------------------------------------------------------------------------
    def _entries(self) -> list[tuple[tuple[str, ...], KnownKey]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        entries: list[tuple[tuple[str, ...], KnownKey]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#") or line.startswith("@"):
                continue
            parts = line.split()
            if len(parts) < 3:
                continue
            try:
                key = KnownKey.parse(" ".join(parts[1:3]))
            except ValueError:
                continue
            entries.append((tuple(parts[0].split(",")), key))
        return entries

    def keys_for(self, host: str, port: int) -> tuple[KnownKey, ...]:
        hid = host_id(host, port)
        return tuple(key for hosts, key in self._entries() if hid in hosts)

    # -- writing -------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with self._thread_lock, open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _rewrite(self, host: str, port: int, keys: Iterable[KnownKey]) -> None:
        hid = host_id(host, port)
        try:
            old_lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            old_lines = []
        kept = [ln for ln in old_lines if not (ln.split() and hid in ln.split()[0].split(","))]
        new = kept + [f"{hid} {k.line}" for k in keys]
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".known_hosts.")
        try:
            with os.fdopen(fd, "w") as f:
                f.write("".join(ln + "\n" for ln in new))
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def pin(self, host: str, port: int, keys: Iterable[str | KnownKey]) -> None:
        """Record ``keys`` as THE keys of ``host:port``, replacing whatever was recorded."""
        parsed = [k if isinstance(k, KnownKey) else KnownKey.parse(k) for k in keys]
        with self._locked():
            self._rewrite(host, port, parsed)

    def forget(self, host: str, port: int) -> None:
        """Drop the record for ``host:port`` (a reinstalled machine); the next contact needs trust again."""
        with self._locked():
            self._rewrite(host, port, ())

    # -- the rules -----------------------------------------------------------------------------------
    def verify(self, host: str, port: int, seen: KnownKey, trust: HostTrust) -> None:
        """Accept ``seen`` for ``host:port`` under ``trust`` (recording it where the rules say), or raise."""
        hid = host_id(host, port)
        if trust.explicit:
            allowed = {KnownKey.parse(k) for k in trust.keys}
            fps = {normalize_fingerprint(f) for f in trust.fingerprints}
            if seen in allowed or seen.fingerprint in fps:
                if self.keys_for(host, port) != (seen,):
                    self.pin(host, port, [seen])
                return
            expected = tuple(sorted({k.fingerprint for k in allowed} | fps))
            raise HostKeyMismatchError(
                f"host key mismatch: {seen.key_type} {seen.fingerprint} is not the configured key "
                f"(expected {', '.join(expected)}); refusing to connect. If the machine was reinstalled, "
                "update host_key/host_key_fingerprint in orch's config",
                endpoint=hid, seen=seen.fingerprint, expected=expected,
            )
        with self._locked():
            pinned = self.keys_for(host, port)
            if seen in pinned:
                return
            if pinned:
                expected = tuple(k.fingerprint for k in pinned)
                raise HostKeyMismatchError(
                    f"host key CHANGED: expected {', '.join(expected)}, server presented {seen.key_type} "
                    f"{seen.fingerprint}; refusing to connect (possible man-in-the-middle). If the machine "
                    f"was reinstalled, remove the line for {hid} from {self.path}",
                    endpoint=hid, seen=seen.fingerprint, expected=expected,
                )
            if not trust.allow_first_contact:
                raise UnknownHostKeyError(
                    f"unknown host key {seen.key_type} {seen.fingerprint}; refusing to connect. Pin it: set "
                    f"host_key or host_key_fingerprint for this host in orch's config, or add "
                    f"'{hid} {seen.line}' to {self.path}",
                    endpoint=hid, seen=seen.fingerprint,
                )
            self._rewrite(host, port, [seen])

    def policy(self, host: str, port: int, trust: HostTrust) -> paramiko.MissingHostKeyPolicy:
        """A paramiko policy applying ``verify``. Give the SSHClient NO host keys of its own, so paramiko
        hands every server key to this policy (it only consults the policy for keys it does not know)."""
        return _store_policy()(self, host, port, trust)


@cache
def _store_policy() -> type[paramiko.MissingHostKeyPolicy]:
    """The policy class, made on first use: paramiko (~0.6 s of imports) loads when a connection is made, not
    when a daemon that may never open one imports this module (``orchestrator/runtime/transport_pool.py``)."""
    import paramiko

    class _StorePolicy(paramiko.MissingHostKeyPolicy):
        def __init__(self, store: HostKeyStore, host: str, port: int, trust: HostTrust) -> None:
            self._store = store
            self._host = host
            self._port = port
            self._trust = trust

        def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
            self._store.verify(self._host, self._port, KnownKey.from_pkey(key), self._trust)

    return _StorePolicy
