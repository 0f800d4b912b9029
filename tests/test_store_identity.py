"""One daemon per SQLite store by the FILE, not by the name given; the store's files are private.

The lock is an OS lock on the database file itself, so names that reach one file (a symlink to it, to
its directory, a hardlink elsewhere) contend for one lock, while two different files never do.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.store import Store, open_store
from orchestrator.store.leases import DaemonAlreadyRunningError, daemon_lock, lock_path


@pytest.fixture
def real(tmp_path: Path) -> Iterator[Store]:
    store = open_store(f"sqlite:///{tmp_path / 'state' / 'orch.db'}")
    yield store
    store.close()


def _other(path: Path) -> Store:
    return open_store(f"sqlite:///{path}")


@pytest.mark.parametrize("how", ["symlink to the file", "symlink to its directory", "hardlink elsewhere"])
def test_a_second_daemon_through_another_name_is_refused(how: str, real: Store, tmp_path: Path) -> None:
    db = tmp_path / "state" / "orch.db"
    if how == "symlink to the file":
        other = tmp_path / "alias.db"
        other.symlink_to(db)
    elif how == "symlink to its directory":
        (tmp_path / "elsewhere").symlink_to(tmp_path / "state", target_is_directory=True)
        other = tmp_path / "elsewhere" / "orch.db"
    else:
        (tmp_path / "mirror").mkdir()
        other = tmp_path / "mirror" / "copy.db"
        os.link(db, other)
    second = _other(other)
    try:
        with daemon_lock(real), pytest.raises(DaemonAlreadyRunningError, match="another orch daemon"), \
                daemon_lock(second):
            pass
        with daemon_lock(second):   # the first let go: the other name may take it now
            pass
    finally:
        second.close()


def test_the_holders_pid_is_named_when_it_reached_the_file_by_a_symlink(real: Store, tmp_path: Path) -> None:
    (tmp_path / "alias.db").symlink_to(tmp_path / "state" / "orch.db")
    second = _other(tmp_path / "alias.db")
    try:
        with daemon_lock(second), pytest.raises(DaemonAlreadyRunningError, match=rf"pid {os.getpid()}\b"), \
                daemon_lock(real):
            pass
    finally:
        second.close()


def test_two_different_files_do_not_exclude_each_other(real: Store, tmp_path: Path) -> None:
    other = _other(tmp_path / "other" / "orch.db")
    try:
        with daemon_lock(real), daemon_lock(other):
            pass
    finally:
        other.close()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_store_is_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)   # a permissive umask: group-writable, world-readable by default
    try:
        store = open_store(f"sqlite:///{tmp_path / 'data' / 'orch' / 'orch.db'}")
        with daemon_lock(store):
            pass
        store.close()
    finally:
        os.umask(old)
    directory = tmp_path / "data" / "orch"
    assert _mode(directory) == 0o700
    for name in ("orch.db", "orch.db.schema-lock", "orch.db.lock"):
        assert _mode(directory / name) == 0o600, name
    assert lock_path(store) == (directory / "orch.db.lock").resolve()


def test_an_existing_directory_is_left_as_it_is(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    open_store(f"sqlite:///{shared / 'orch.db'}").close()
    assert _mode(shared) == 0o755 and _mode(shared / "orch.db") == 0o600
