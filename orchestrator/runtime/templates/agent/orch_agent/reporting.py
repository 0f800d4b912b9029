"""The outbound report: the status document and the job's output put in the report store on a thread of its own."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from .store import Store

#: GPU samples kept in the reported copy of the status (the local file keeps the whole window).
REPORTED_SAMPLES = 12


class Reporter:
    """Writes the status and the job's output to the report store (``config["report"]``), outbound only.

    ``status.json``: the status document (as the local file, with the last few GPU samples), one whole
    object per write. ``logs/<NNNNNNNN>``: the job log cut at ``log_chunk_bytes``; chunk k holds bytes
    [k*C, (k+1)*C) and only the chunks that grew are put again (each whole).

    Uploads run on a background thread, so a slow store never delays the agent's own round (a notice, the
    drain, checkpoint uploads): ``submit`` hands over the newest status (serialized at once) and returns;
    a status superseded before its upload started is skipped. A failed upload is reported through
    ``on_error`` and retried with the next status. ``flush`` waits for what was submitted (the last report).
    """

    def __init__(self, spec: dict[str, Any], store: Store, clock: Callable[[], float],
                 on_error: Callable[[str, BaseException], None] = lambda where, exc: None) -> None:
        self.store = store
        self.clock = clock
        self.on_error = on_error
        self.interval = float(spec.get("interval_s", 10.0))
        self.chunk = max(1, int(spec.get("log_chunk_bytes", 1 << 20)))
        self.next_at = 0.0
        self.last_key: Any = None
        self.shipped = 0           # bytes of the job log already in the store
        self._cond = threading.Condition()
        self._pending: tuple[bytes, str] | None = None
        self._busy = False
        self._thread: threading.Thread | None = None

    def due(self, key: Any, force: bool) -> bool:
        return force or key != self.last_key or self.clock() >= self.next_at

    def submit(self, doc: dict[str, Any], key: Any, job_log: str) -> None:
        gpu = dict(doc["gpu"])
        gpu["samples"] = list(gpu["samples"])[-REPORTED_SAMPLES:]
        body = json.dumps({**doc, "gpu": gpu}, sort_keys=True).encode() + b"\n"
        self.last_key = key
        self.next_at = self.clock() + self.interval
        with self._cond:
            self._pending = (body, job_log)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="orch-report", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout_s: float = 120.0) -> bool:
        """Wait until everything submitted is uploaded (or failed); False after ``timeout_s``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout_s)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None)
                assert self._pending is not None
                (body, job_log), self._pending = self._pending, None
                self._busy = True
            try:
                self.upload(body, job_log)
            except (OSError, subprocess.SubprocessError) as exc:
                self.on_error("report", exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def upload(self, body: bytes, job_log: str) -> None:
        self.ship_log(job_log)
        self.store.put_object("status.json", body)

    def ship_log(self, path: str) -> None:
        try:
            size = os.path.getsize(path)
        except OSError:
            return
        if size <= self.shipped:
            return
        with open(path, "rb") as fh:
            for k in range(self.shipped // self.chunk, (size - 1) // self.chunk + 1):
                fh.seek(k * self.chunk)
                data = fh.read(min(self.chunk, size - k * self.chunk))
                self.store.put_object(f"logs/{k:08d}", data)
        self.shipped = size
