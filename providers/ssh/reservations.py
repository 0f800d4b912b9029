"""Reservations of configured hosts: one JSON file per host, written under an exclusive lock.

"Launching" a machine you own means reserving it for one launch. Two orch processes sharing the state
dir cannot both reserve a host: the check and the write happen under ``flock`` on ``<host>.lock``, and
the record is replaced atomically, so readers never see half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

__all__ = ["HostReservedError", "Reservation", "ReservationBook"]


@dataclass(frozen=True, slots=True)
class Reservation:
    host: str
    launch_id: str
    owner: str
    job: str
    reserved_at: datetime

    def to_json(self) -> str:
        d = asdict(self)
        d["reserved_at"] = self.reserved_at.isoformat()
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Reservation:
        d = json.loads(text)
        return cls(host=d["host"], launch_id=d["launch_id"], owner=d["owner"], job=d.get("job", ""),
                   reserved_at=datetime.fromisoformat(d["reserved_at"]))


class HostReservedError(Exception):
    """The host is reserved by another launch. ``holder`` is that reservation."""

    def __init__(self, holder: Reservation) -> None:
        self.holder = holder
        super().__init__(f"host {holder.host} is reserved by owner {holder.owner!r} for launch "
                         f"{holder.launch_id} (job {holder.job!r}) since {holder.reserved_at.isoformat()}")


class ReservationBook:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)

    def _record(self, host: str) -> Path:
        return self.state_dir / f"{host}.json"

    @contextlib.contextmanager
    def _locked(self, host: str) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / f"{host}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def get(self, host: str) -> Reservation | None:
        try:
            return Reservation.from_json(self._record(host).read_text())
        except FileNotFoundError:
            return None

    def all(self) -> list[Reservation]:
        if not self.state_dir.is_dir():
            return []
        found = [self.get(p.stem) for p in sorted(self.state_dir.glob("*.json"))]
        return [r for r in found if r is not None]

    def reserve(self, wanted: Reservation) -> tuple[Reservation, bool]:
        """Reserve ``wanted.host`` for ``wanted.launch_id``. Returns (the record, whether it is new).

        Already reserved by the same launch id: that record, not new (idempotent). By another: raises
        HostReservedError.
        """
        with self._locked(wanted.host):
            held = self.get(wanted.host)
            if held is not None:
                if held.launch_id == wanted.launch_id:
                    return held, False
                raise HostReservedError(held)
            fd, tmp = tempfile.mkstemp(dir=self.state_dir, prefix=f".{wanted.host}.")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(wanted.to_json())
                os.replace(tmp, self._record(wanted.host))
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            return wanted, True

    def release(self, host: str, launch_id: str | None = None) -> bool:
        """Drop the reservation (only if it is ``launch_id``'s, when given). True when one was dropped."""
        with self._locked(host):
            held = self.get(host)
            if held is None or (launch_id is not None and held.launch_id != launch_id):
                return False
            self._record(host).unlink(missing_ok=True)
            return True

    # -- hosts that could not be cleaned -------------------------------------------------------------------
    def _note(self, host: str) -> Path:
        return self.state_dir / f"{host}.unusable"

    def mark_unusable(self, host: str, reason: str) -> None:
        """Note why ``host`` stays reserved after its launch ended (its processes could not be stopped)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._note(host).write_text(reason + "\n")

    def unusable(self, host: str) -> str | None:
        """The reason ``host`` is marked unusable, or None."""
        try:
            return self._note(host).read_text().strip() or "unusable"
        except FileNotFoundError:
            return None

    def clear_unusable(self, host: str) -> None:
        self._note(host).unlink(missing_ok=True)
