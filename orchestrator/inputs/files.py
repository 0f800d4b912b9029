"""Reading a user's input file (a manifest, a trace) within bounds, whatever the path names.

Only regular files are read: a directory, a FIFO (which would block), a device such as /dev/zero (which
never ends) or a socket is refused before anything is read. The size cap is counted while reading, never
taken from ``st_size`` (a /proc file or a growing file reports no true size). Every failure is an
InputFileError with a one-line message (a file name too long, no permission, not UTF-8).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class InputFileError(ValueError):
    """The file cannot be read as input; ``message`` says why, ``line`` where (not UTF-8) if known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def read_text_file(path: Path, limit: int, what: str = "input file") -> str:
    """The UTF-8 text of ``path``, a regular file of at most ``limit`` bytes."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)   # non-blocking: opening a FIFO that has no writer must not hang
    except OSError as exc:
        raise InputFileError(os_error_text(exc)) from None
    try:
        data = _read_capped(fd, limit, what)
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputFileError(f"not UTF-8 text (byte {exc.start})", line=line) from None


def _read_capped(fd: int, limit: int, what: str) -> bytes:
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputFileError(f"not a regular file ({_file_kind(mode)}); a {what} is a text file")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                raise InputFileError(f"file is too large for a {what} (more than {_size(limit)})")
            chunks.append(chunk)
    except OSError as exc:
        raise InputFileError(os_error_text(exc)) from None


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _size(n: int) -> str:
    mib = 1024 * 1024
    return f"{n // mib} MiB" if n % mib == 0 else f"{n} bytes"


def os_error_text(exc: OSError) -> str:
    """One line for an OSError met while opening or reading an input path."""
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    if exc.errno == errno.ELOOP:
        return "too many levels of symbolic links"
    return f"cannot read: {exc.strerror or exc}"
