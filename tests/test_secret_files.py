"""A secrets file on a node is never readable by anyone else, not even while it is being written.

LocalTransport creates it owner-only (O_CREAT|O_EXCL, mode 0600) and never widens it; over SFTP, where a
new file gets the server's umask, it is written inside a fresh 0700 directory and renamed into place. The
SSH case runs against the real sshd on 127.0.0.1 (tests/support/sshd.py).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

import paramiko
import pytest

from providers.ssh.connection import SshTransport
from providers.ssh.hostkeys import HostKeyStore, HostTrust
from providers.ssh.local import LocalTransport
from tests.support.sshd import Sshd, sshd  # noqa: F401 - fixture


def test_local_put_creates_the_file_owner_only_and_never_chmods_it_wider(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import providers.ssh.local as local

    created: list[tuple[str, int, int]] = []
    real_open = os.open

    def spy_open(path: str | Path, flags: int, mode: int = 0o777, *args: object, **kw: object) -> int:
        created.append((str(path), flags, mode))
        return real_open(path, flags, mode, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(local.os, "open", spy_open)
    monkeypatch.setattr(local.os, "chmod", lambda *a, **k: pytest.fail("chmod after creation"))
    old = os.umask(0)   # no umask to hide a wide creation mode
    try:
        LocalTransport(tmp_path / "node").put(b"export HF_TOKEN=x\n", "work/secrets.env", 0o600)
    finally:
        os.umask(old)
    [(_path, flags, mode)] = [c for c in created if "secrets.env" in c[0]]
    assert flags & os.O_CREAT and flags & os.O_EXCL and mode == 0o600
    final = tmp_path / "node" / "work" / "secrets.env"
    assert stat.S_IMODE(final.stat().st_mode) == 0o600 and final.read_bytes() == b"export HF_TOKEN=x\n"


def test_ssh_put_writes_inside_a_private_directory_then_renames(
        sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811 - fixture
    seen: list[tuple[str, int]] = []
    real_open = paramiko.SFTPClient.open

    def spy_open(self: paramiko.SFTPClient, filename: str, mode: str = "r", bufsize: int = -1) -> object:
        if "w" in mode:   # at the moment the file is created: who can reach it?
            parent = str(PurePosixPath(filename).parent)
            seen.append((parent, stat.S_IMODE(self.stat(parent).st_mode or 0)))
        return real_open(self, filename, mode, bufsize)

    monkeypatch.setattr(paramiko.SFTPClient, "open", spy_open)
    t = SshTransport(sshd.host, sshd.port, sshd.user, key_path=sshd.client_key_path,
                     host_keys=HostKeyStore(tmp_path / "kh"), trust=HostTrust(keys=(sshd.host_key_line,)),
                     connect_timeout=5.0, workdir=str(sshd.workdir))
    try:
        t.put(b"export WANDB_API_KEY=x\n", "job/secrets.env", 0o600)
    finally:
        t.close()
    [(parent, mode)] = seen
    assert mode == 0o700 and PurePosixPath(parent).name.startswith(".orch-put-")
    job = sshd.workdir / "job"
    assert sorted(p.name for p in job.iterdir()) == ["secrets.env"]     # the private directory is gone
    assert stat.S_IMODE((job / "secrets.env").stat().st_mode) == 0o600
