"""The agent's interruption layer: a cloud's notice or orch's checkpoint-now asks the job to checkpoint; after
an interrupting one, once a checkpoint taken since is complete on disk, the job is stopped (the drain) and only
the checkpoints complete then may still be committed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Any

from .commits import CheckpointCommits
from .job import JobControl
from .notices import ADVISORY_KINDS
from .proctree import signal_tree

#: Written by orch in the report prefix: checkpoint now, then stop (orchestrator/runtime/node_state.py).
CHECKPOINT_NOW_OBJECT = "checkpoint-now.json"


class Interrupts(CheckpointCommits, JobControl):
    """Hears notices (``notices``), asks for checkpoints (``requests``) and drains the job after a notice."""

    def request_checkpoint(self, reason: str) -> None:
        if not self.ckpt:
            return
        notify = self.ckpt.get("notify", {})
        via = notify.get("via", "file")
        try:
            if via == "signal":
                if self.proc is None or self.job["state"] != "running":
                    raise OSError("no running job to signal")
                sig = getattr(signal, notify.get("signal", "SIGUSR1"))
                # Launchers ignore it (the startup script's trap); the training ranks handle it.
                signal_tree(self.proc.pid, sig)
            else:
                path = notify["file"]
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(reason + "\n")
        except (OSError, AttributeError, KeyError) as exc:
            self._error("checkpoint-now", exc)
            return
        self.requests.append({"time": self.clock(), "via": via, "reason": reason})

    def _poll_notices(self) -> None:
        try:
            current = self.poller.poll()
        except (OSError, ValueError) as exc:
            self._error("notice", exc)
            current = []
        current += self._orch_requests()
        seen = {n["key"] for n in self.notices}
        for notice in current:
            if notice["key"] in seen:
                continue
            # Only an interruption drains the job; an advisory (AWS rebalance, GCE maintenance) asks for a
            # checkpoint now and is reported, nothing more (orch's NoticeKind.ends_attempt says the same).
            if self.notice_baseline is None and notice["kind"] not in ADVISORY_KINDS:
                self.notice_baseline = set(self._complete_local())
            self.notices.append({**notice, "seen_at": self.clock()})
            self.request_checkpoint(f"{notice['cloud']} {notice['kind']}")

    def _orch_requests(self) -> list[dict[str, Any]]:
        """orch's own "checkpoint now, then stop" (``checkpoint-now.json`` in the report prefix, written when
        the job's budget is spent): an interrupting notice of kind ``orch-stop``, so the job checkpoints, is
        stopped once that checkpoint is complete, and the upload goes on (the drain)."""
        if (self.reporter is None or any(n["kind"] == "orch-stop" for n in self.notices)
                or self.clock() < self.next_orch_poll):
            return []
        # One look per report interval, not per notice poll: on a bucket each look is a LIST request.
        self.next_orch_poll = self.clock() + max(self.notice_interval, float(self.reporter.interval))
        try:
            if not self.reporter.store.has(CHECKPOINT_NOW_OBJECT):
                return []
            detail = json.loads(self.reporter.store.read_object(CHECKPOINT_NOW_OBJECT) or b"{}")
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            self._error("notice", exc)
            return []
        detail = detail if isinstance(detail, dict) else {}
        return [{"cloud": "orch", "kind": "orch-stop", "key": f"orch:checkpoint-now:{detail.get('at')}",
                 "detail": detail}]

    def _drain_after_notice(self) -> None:
        """After a preemption notice, as soon as a checkpoint taken since is complete on disk, stop the
        job (the upload goes on): the machine is going away, steps trained past that checkpoint would be
        lost, and this machine writing checkpoints beside its replacement would interleave lineages.
        Single-node only: on several nodes stopping one node's ranks makes the others fail before node 0
        commits, so the notice window ends them instead. ``drain_after_notice: false`` opts out."""
        if not self._drain_due() or self.notice_baseline is None:
            return
        if set(self._complete_local()) - self.notice_baseline:
            self.sealed = set(self._complete_local())
            self.job["drained"] = True
            self.job["drained_at"] = self.clock()
            self.stop_job(signal.SIGTERM)

    def _drain_due(self) -> bool:
        """A notice was heard and the job runs on, not yet drained (single node, draining on)."""
        return not (self.nodes > 1 or self.notice_baseline is None or not self.ckpt
                    or self.job["state"] != "running" or self.job.get("drained")
                    or not self.config.get("drain_after_notice", True))
