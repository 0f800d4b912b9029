"""The agent's first layer: its config, its injected parts and the state every later layer reads and writes
(the layers: job, commits, interrupts, rounds, agent). A restarted agent restores what it committed."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

from .gpu import GpuSampler
from .notices import NoticePoller
from .reporting import Reporter
from .store import Store

MAX_ERRORS = 20


class AgentBase:
    """The agent's config, its parts and its state (the constructor's arguments: see ``Agent``)."""

    def __init__(self, config: dict[str, Any], clock: Callable[[], float] = time.time,
                 sampler: GpuSampler | None = None, poller: Any = None, store: Store | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.clock = clock
        self.sleep = sleep
        self.sampler = sampler or GpuSampler(int(config.get("window", 120)))
        self.poller = poller or NoticePoller(config.get("cloud", "none"), config.get("metadata", {}))
        ckpt = config.get("checkpoint") or None
        self.ckpt = ckpt
        self.store = store or (Store(ckpt["store"], config.get("rclone", "rclone")) if ckpt else None)
        self.status_path = config.get("status_path", "status.json")
        self.sample_interval = float(config.get("sample_interval_s", 5.0))
        self.notice_interval = float(config.get("notice_interval_s", 1.0))
        self.next_sample = 0.0
        self.next_notice = 0.0
        self.credentials_interval = float(config.get("credentials_interval_s", 300.0))
        self.next_credentials = 0.0
        self.next_orch_poll = 0.0
        self.notices: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.failed_uploads: dict[str, int] = {}
        self.errors: list[dict[str, Any]] = []
        self.latest: str | None = None
        self.node_rank = int(config.get("node_rank", 0))
        self.nodes = int(config.get("nodes", 1))
        self.parts: list[str] = []           # multi-node: checkpoints whose part this node has uploaded
        self.notice_baseline: set[str] | None = None   # checkpoints complete on disk when the notice came
        #: After a drain, the only checkpoints this node may still commit (those complete at the drain): the
        #: replacement may start once they are in, while this job still shuts down, so nothing later may
        #: move LATEST past what the replacement restored.
        self.sealed: set[str] | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.job: dict[str, Any] = {"state": "pending", "pid": None, "exit_code": None, "started_at": None,
                                    "ended_at": None}
        self.started_at = clock()
        self.awaiting_go = False
        report = config.get("report") or None
        self.reporter = (Reporter(report, Store(report, config.get("rclone", "rclone")), clock, self._error)
                         if report else None)
        self._restore_from_status()

    def _restore_from_status(self) -> None:
        # A restarted agent must not re-upload or forget what it already committed.
        try:
            with open(self.status_path, encoding="utf-8") as fh:
                old = json.load(fh)
        except (OSError, ValueError):
            return
        self.checkpoints = list(old.get("checkpoints", []))
        self.parts = list(old.get("parts", []))
        self.latest = old.get("latest")
        self.notices = list(old.get("notices", []))

    def _error(self, where: str, exc: BaseException | str) -> None:
        self.errors.append({"time": self.clock(), "where": where, "error": str(exc)})
        del self.errors[:-MAX_ERRORS]
