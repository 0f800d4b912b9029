"""File operations over an open SFTP client, for ``SshTransport``: a private, atomic write (parents created)
and a whole-file read. The caller translates paramiko's and the OS's errors."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import paramiko


def write_privately(sftp: paramiko.SFTPClient, dest: PurePosixPath, data: bytes, mode: int | None) -> None:
    """Write ``data`` to ``dest`` (parents created) atomically, given ``mode`` before anyone else can reach it."""
    _makedirs(sftp, dest.parent)
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


def read_file(sftp: paramiko.SFTPClient, path: str) -> bytes:
    """The whole of the remote file ``path``."""
    with sftp.open(path, "rb") as f:
        f.prefetch()
        return bytes(f.read())


def _makedirs(sftp: paramiko.SFTPClient, path: PurePosixPath) -> None:
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
