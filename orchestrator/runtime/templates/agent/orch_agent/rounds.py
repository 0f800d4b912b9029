"""The agent's round: samples GPUs, polls notices, renews store credentials, supervises the job, drains,
commits checkpoints, writes the status file atomically and reports."""

from __future__ import annotations

import json
import os
from typing import Any

from .files import atomic_write
from .interrupts import Interrupts

STATUS_VERSION = 1

#: The round's pause while a drain is due (a notice heard, its checkpoint not yet complete on disk): the
#: checkpoint is committed, and the replacement started, that much sooner after the job wrote it.
DRAIN_POLL_S = 0.05


class Rounds(Interrupts):
    """One round (``tick``), the status document and the report."""

    def status(self) -> dict[str, Any]:
        return {
            "version": STATUS_VERSION,
            "job_name": self.config.get("job_name"),
            "launch_id": os.environ.get("ORCH_LAUNCH_ID", ""),
            "node_rank": self.config.get("node_rank", 0),
            "agent": {"pid": os.getpid(), "started_at": self.started_at, "heartbeat": self.clock(),
                      "awaits_go": self.awaiting_go},
            "job": dict(self.job),
            "gpu": {"available": self.sampler.available, "error": self.sampler.error,
                    "samples": list(self.sampler.samples), "summary": self.sampler.summary()},
            "notices": self.notices,
            "checkpoint_requests": self.requests,
            "checkpoints": self.checkpoints,
            "parts": self.parts,
            "pending_uploads": self._pending_uploads(),
            "latest": self.latest,
            "failed_uploads": dict(self.failed_uploads),
            "errors": self.errors,
        }

    def write_status(self) -> None:
        atomic_write(self.status_path, json.dumps(self.status(), sort_keys=True) + "\n")

    def tick(self) -> None:
        now = self.clock()
        if now >= self.next_sample:
            self.sampler.sample(now)
            self.next_sample = now + self.sample_interval
        if now >= self.next_notice:
            self._poll_notices()
            self.next_notice = now + self.notice_interval
        if self.reporter is not None and now >= self.next_credentials:
            self.refresh_credentials()
            self.next_credentials = now + self.credentials_interval
        self._poll_job()
        self._drain_after_notice()
        self._scan_checkpoints()
        self.write_status()
        self.report()

    def refresh_credentials(self) -> None:
        """Switch to the store credential orch renewed in ``credentials.json`` (if any): this process's
        environment and every store's, so later rclone runs use it. Values are never written to disk or logged."""
        assert self.reporter is not None
        try:
            doc = json.loads(self.reporter.store.read_object("credentials.json") or b"{}")
        except (OSError, ValueError) as exc:
            self._error("credentials", exc)
            return
        env = doc.get("env") if isinstance(doc, dict) else None
        if not isinstance(env, dict) or not env:
            return
        fresh = {str(k): str(v) for k, v in env.items()}
        os.environ.update(fresh)
        for store in (self.store, self.reporter.store):
            if store is not None:
                store.env.update(fresh)

    def report(self, force: bool = False) -> None:
        """Send the status (and new job output) to the report store when something the daemon acts on
        changed, or every ``interval_s`` as a heartbeat."""
        if self.reporter is None:
            return
        key = (self.job["state"], self.job.get("drained", False), len(self.notices), self.latest,
               self._pending_uploads(), len(self.checkpoints))
        if self.reporter.due(key, force):
            self.reporter.submit(self.status(), key, self.config.get("job_log", "job.log"))

    def final_report(self) -> None:
        """The last word before the agent exits: the final status and output, uploaded before it returns."""
        if self.reporter is not None:
            self.report(force=True)
            self.reporter.flush()

    def round_pause(self) -> float:
        """The pause between rounds: the shortest interval (at most 1 s), ``DRAIN_POLL_S`` while a drain is
        due (see ``_drain_after_notice``)."""
        pause = min(self.sample_interval, self.notice_interval, 1.0)
        return min(pause, DRAIN_POLL_S) if self._drain_due() else pause
