"""The durable store the agent uploads checkpoints and reports to: rclone (``path`` is remote:path) or a local
directory. Uploads put a checkpoint's marker last, so a partial copy never looks complete."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any

from .files import atomic_write

#: rclone flags for an upload that overwrites whatever is there (a new step directory, LATEST).
FRESH_DEST = ("--no-traverse", "--no-check-dest")


class Store:
    """The durable store: rclone (``path`` is remote:path) or a local directory (plain copies)."""

    def __init__(self, spec: dict[str, Any], rclone: str = "rclone") -> None:
        self.kind = spec["kind"]
        self.path = spec["path"].rstrip("/")
        self.uri = spec.get("uri", self.path).rstrip("/")
        self.env = {**os.environ, **spec.get("env", {})}
        self.rclone = rclone

    def _rclone(self, *args: str, timeout: float = 3600.0) -> str:
        out = subprocess.run([self.rclone, *args], capture_output=True, text=True, env=self.env, timeout=timeout)
        if out.returncode != 0:
            raise OSError(f"rclone {args[0]} exited {out.returncode}: {out.stderr.strip()[-500:]}")
        return out.stdout

    def upload_dir(self, local: str, name: str, marker: str) -> None:
        """Upload ``local`` as ``name``; the marker goes last so a partial copy never looks complete."""
        dest = f"{self.path}/{name}"
        if self.kind == "local":
            tmp = f"{dest}.partial"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(local, tmp, ignore=shutil.ignore_patterns(marker))
            shutil.copy2(os.path.join(local, marker), os.path.join(tmp, marker))
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(tmp, dest)
            return
        # A new step directory: nothing there to compare with (--no-traverse: no listing first; --no-check-dest:
        # no lookup per file; a retry uploads again, which overwrites).
        self._rclone("copy", local, dest, "--exclude", f"/{marker}", *FRESH_DEST)
        self._rclone("copyto", os.path.join(local, marker), f"{dest}/{marker}", *FRESH_DEST)

    def upload_part(self, local: str, name: str, marker: str, node_rank: int) -> None:
        """One node's part of a multi-node checkpoint: its files, then ``<marker>.node-<rank>`` (its
        "my part is in" flag). The checkpoint's own marker is node 0's to write, once every part is in."""
        dest = f"{self.path}/{name}"
        flag = f"{marker}.node-{node_rank}"
        if self.kind == "local":
            os.makedirs(dest, exist_ok=True)
            for entry in os.listdir(local):
                if entry != marker:
                    src = os.path.join(local, entry)
                    if os.path.isdir(src):
                        shutil.copytree(src, os.path.join(dest, entry), dirs_exist_ok=True)
                    else:
                        shutil.copy2(src, os.path.join(dest, entry))
            atomic_write(os.path.join(dest, flag), "ok\n")
            return
        self._rclone("copy", local, dest, "--exclude", f"/{marker}")
        self._rclone("copyto", os.path.join(local, marker), f"{dest}/{flag}")

    def has(self, name: str) -> bool:
        """Whether the object ``name`` (relative to the store's path) exists."""
        if self.kind == "local":
            return os.path.exists(f"{self.path}/{name}")
        parent, _, leaf = name.rpartition("/")
        try:
            listed = self._rclone("lsf", f"{self.path}/{parent}" if parent else self.path, "--files-only",
                                  timeout=120)
        except OSError:
            return False
        return leaf in listed.splitlines()

    def write_marker(self, name: str, marker: str) -> None:
        """Write the checkpoint's own marker (multi-node: after every node's part is in)."""
        if self.kind == "local":
            atomic_write(f"{self.path}/{name}/{marker}", "complete\n")
            return
        with tempfile.NamedTemporaryFile("w", suffix=".marker", delete=False) as fh:
            fh.write("complete\n")
        try:
            self._rclone("copyto", fh.name, f"{self.path}/{name}/{marker}", timeout=300)
        finally:
            os.unlink(fh.name)

    def read_object(self, name: str) -> bytes | None:
        """The whole object ``name``, or None when it cannot be read."""
        if self.kind == "local":
            try:
                with open(f"{self.path}/{name}", "rb") as fh:
                    return fh.read()
            except OSError:
                return None
        out = subprocess.run([self.rclone, "cat", f"{self.path}/{name}"], capture_output=True, env=self.env,
                             timeout=120)
        return out.stdout if out.returncode == 0 else None

    def delete_object(self, name: str) -> None:
        """Remove the object ``name``; an absent one is not an error."""
        if self.kind == "local":
            try:
                os.remove(f"{self.path}/{name}")
            except FileNotFoundError:
                pass
            return
        out = subprocess.run([self.rclone, "deletefile", f"{self.path}/{name}"], capture_output=True, text=True,
                             env=self.env, timeout=120)
        if out.returncode not in (0, 3, 4):
            raise OSError(f"rclone deletefile exited {out.returncode}: {out.stderr.strip()[-500:]}")

    def put_object(self, name: str, data: bytes) -> None:
        """Write the whole object ``name`` at once: a temp file renamed (local), one PUT (rclone rcat)."""
        if self.kind == "local":
            dest = f"{self.path}/{name}"
            directory = os.path.dirname(dest)
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, dest)
            return
        out = subprocess.run([self.rclone, "rcat", f"{self.path}/{name}"], input=data, capture_output=True,
                             env=self.env, timeout=300)
        if out.returncode != 0:
            raise OSError(f"rclone rcat exited {out.returncode}: {out.stderr.decode('utf-8', 'replace')[-500:]}")

    def read_latest(self) -> str | None:
        if self.kind == "local":
            try:
                with open(f"{self.path}/LATEST", encoding="utf-8") as fh:
                    return fh.read().strip() or None
            except FileNotFoundError:
                return None
        out = subprocess.run([self.rclone, "cat", f"{self.path}/LATEST"], capture_output=True, text=True,
                             env=self.env, timeout=120)
        if out.returncode in (3, 4):
            return None         # rclone: directory / file not found (an absent object on a bucket is exit 0, empty)
        if out.returncode != 0:
            # Unknown is not "none": LATEST must never be written over a step this agent could not see.
            raise OSError(f"rclone cat exited {out.returncode}: {out.stderr.strip()[-500:]}")
        return out.stdout.strip() or None

    def write_latest(self, name: str) -> None:
        if self.kind == "local":
            os.makedirs(self.path, exist_ok=True)
            atomic_write(f"{self.path}/LATEST", name + "\n")
            return
        with tempfile.NamedTemporaryFile("w", suffix=".latest", delete=False) as fh:
            fh.write(name + "\n")
        try:
            self._rclone("copyto", fh.name, f"{self.path}/LATEST", *FRESH_DEST, timeout=300)
        finally:
            os.unlink(fh.name)
