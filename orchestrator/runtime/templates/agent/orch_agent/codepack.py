"""The job's code pack, checked against its sha256 and unpacked into the work dir once."""

from __future__ import annotations

import hashlib
import os
import tarfile
from typing import Any

from .files import atomic_write
from .store import Store


def unpack_code(spec: dict[str, Any], dest: str) -> None:
    """Unpack the job's code pack (``spec["file"]``, put beside the agent by the launch) into ``dest``, once:
    its sha256 must be the applied one, no member may leave ``dest``; a marker names the unpacked pack."""
    marker = os.path.join(dest, ".orch-code")
    try:
        with open(marker, encoding="utf-8") as fh:
            if fh.read().strip() == spec["sha256"]:
                return                      # a restarted agent: already unpacked
    except OSError:
        pass
    path = os.path.join(dest, spec["file"])
    if not os.path.exists(path) and spec.get("store"):
        # Booted by its user data: the pack is in the job's store (put there by orch before the go).
        fetched = Store(spec["store"]).read_object(spec["object"])
        if fetched is None:
            raise OSError(f"{spec['object']} is not in {spec['store'].get('uri')}")
        with open(path, "wb") as fh:
            fh.write(fetched)
    with open(path, "rb") as fh:
        data = fh.read()
    if hashlib.sha256(data).hexdigest() != spec["sha256"]:
        raise ValueError(f"{spec['file']} does not match its sha256 (a partial or altered copy)")
    root = os.path.realpath(dest)
    with tarfile.open(path, "r:gz") as tar:
        members = tar.getmembers()
        for m in members:
            target = os.path.realpath(os.path.join(root, m.name))
            if m.name.startswith("/") or (target != root and not target.startswith(root + os.sep)):
                raise ValueError(f"{spec['file']}: member {m.name!r} would land outside the work dir")
            if not (m.isfile() or m.isdir() or m.issym()):
                raise ValueError(f"{spec['file']}: member {m.name!r} is not a file, directory or link")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, members=members, filter="data")
        else:
            tar.extractall(root, members=members)
    atomic_write(marker, spec["sha256"] + "\n")
