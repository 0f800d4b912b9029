"""The agent's checkpoint layer: uploads every checkpoint complete on disk (``<dir>/step-<N>/`` with its
marker) and only then moves the store's LATEST to it, never backwards; on several nodes each uploads its part and
node 0 writes the checkpoint's marker once every part is in."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from .base import AgentBase

STEP_DIR = re.compile(r"^step-(\d+)$")


def step_of(name: str) -> int:
    m = STEP_DIR.fullmatch(name)
    return int(m.group(1)) if m else -1


class _Unread:
    """Not read yet (``_move_latest`` reads LATEST itself)."""


_UNREAD = _Unread()


class _Background:
    """``fn()`` run on a thread of its own from now; ``result()`` waits for it (its exception re-raised)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


class CheckpointCommits(AgentBase):
    """Commits checkpoints in step order (``checkpoints``, ``parts``, ``latest``, ``failed_uploads``)."""

    def _scan_checkpoints(self) -> None:
        if not self.ckpt or self.store is None:
            return
        root, marker = self.ckpt["dir"], self.ckpt.get("marker", "COMPLETE")
        committed = {c["name"] for c in self.checkpoints}
        todo = [n for n in self._committable() if n not in committed]
        if not todo:
            return
        # The store's LATEST, read while the first upload runs (not after it): one rclone start less on the
        # way from a checkpoint on disk to its commit. Single node: this agent is LATEST's only writer meanwhile.
        prefetch = _Background(self.store.read_latest) if self.nodes == 1 else None
        known: str | _Unread | None = _UNREAD
        for name in todo:
            if self.nodes > 1:
                if not self._commit_part(root, name, marker):
                    return
                if self.node_rank != 0:
                    continue
            else:
                try:
                    self.store.upload_dir(os.path.join(root, name), name, marker)
                except (OSError, shutil.Error, subprocess.SubprocessError) as exc:
                    self.failed_uploads[name] = self.failed_uploads.get(name, 0) + 1
                    self._error(f"upload {name}", exc)
                    return  # keep order: never commit a later checkpoint past a failed one
            moved: bool | None = None
            if prefetch is None:
                moved = self._move_latest(name)
            else:
                try:
                    if isinstance(known, _Unread):
                        known = prefetch.result()
                    moved = self._move_latest(name, known)
                except (OSError, subprocess.SubprocessError) as exc:
                    self._error(f"latest {name}", exc)
            if moved is None:
                # LATEST could not be read or written: not committed, asked again next round (as a failed upload),
                # so neither the status nor a drain counts it and a later checkpoint never commits past it.
                self.failed_uploads[name] = self.failed_uploads.get(name, 0) + 1
                return
            self.failed_uploads.pop(name, None)
            self.checkpoints.append({"name": name, "step": step_of(name), "uri": f"{self.store.uri}/{name}",
                                     "committed_at": self.clock()})
            if moved:
                known = name        # what this agent just wrote is LATEST now

    def _commit_part(self, root: str, name: str, marker: str) -> bool:
        """Multi-node: upload this node's part once; on node 0, also wait (returning False, so the next
        round asks again) until every node's part is in, then write the checkpoint's marker. Only then may
        LATEST move: a checkpoint missing one node's files is never LATEST."""
        assert self.store is not None
        if name not in self.parts:
            try:
                self.store.upload_part(os.path.join(root, name), name, marker, self.node_rank)
            except (OSError, shutil.Error, subprocess.SubprocessError) as exc:
                self.failed_uploads[name] = self.failed_uploads.get(name, 0) + 1
                self._error(f"upload {name}", exc)
                return False
            self.parts.append(name)
            if self.node_rank != 0:
                self.failed_uploads.pop(name, None)
        if self.node_rank != 0:
            return True
        if not all(self.store.has(f"{name}/{marker}.node-{r}") for r in range(1, self.nodes)):
            return False
        try:
            self.store.write_marker(name, marker)
        except (OSError, subprocess.SubprocessError) as exc:
            self._error(f"marker {name}", exc)
            return False
        return True

    def _move_latest(self, name: str, current: str | _Unread | None = _UNREAD) -> bool | None:
        """Move the store's LATEST to ``name`` unless it is already there or further (``current``: LATEST as
        read before; read now when not given). True when it was written, False when LATEST is at or past it,
        None when LATEST could not be read or written (the error is recorded)."""
        assert self.store is not None
        try:
            if isinstance(current, _Unread):
                current = self.store.read_latest()
            if current is not None and step_of(current) >= step_of(name):
                return False  # LATEST never moves backwards (another node or an earlier life got further)
            self.store.write_latest(name)
        except (OSError, subprocess.SubprocessError) as exc:
            self._error(f"latest {name}", exc)
            return None
        self.latest = name
        return True

    def _complete_local(self) -> list[str]:
        """Names of the checkpoints complete on this node's disk (their marker written), by step."""
        if not self.ckpt:
            return []
        root, marker = self.ckpt["dir"], self.ckpt.get("marker", "COMPLETE")
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            return []
        return sorted((n for n in names if STEP_DIR.fullmatch(n) and os.path.isfile(os.path.join(root, n, marker))),
                      key=step_of)

    def _committable(self) -> list[str]:
        """The complete local checkpoints this node may still commit: all of them, or after a drain only
        those complete at the drain (``sealed``)."""
        names = self._complete_local()
        return names if self.sealed is None else [n for n in names if n in self.sealed]

    def _pending_uploads(self) -> int:
        done = set(self.parts) if self.nodes > 1 and self.node_rank != 0 else {c["name"] for c in self.checkpoints}
        return sum(1 for n in self._committable() if n not in done)
