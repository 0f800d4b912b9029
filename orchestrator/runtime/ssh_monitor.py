"""The engine's Monitor over SSH: read an attempt's agent status and turn it into the engine's ``AgentReport``.

Unreachable or unreadable: None (the engine then relies on the provider's own state). ``listens`` says
where a channel exists at all (liveness deadlines apply only there: orchestrator/engine/liveness.py).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import PurePosixPath

from orchestrator.engine.hooks import AgentReport, Monitor, Notice
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.engine.wake import WatchFor
from orchestrator.runtime.bootstrap import text_of
from orchestrator.runtime.node_facts import NodeSettings
from orchestrator.runtime.render_input import RenderInput
from orchestrator.runtime.status import AgentStatus, JobState, NoticeKind
from orchestrator.runtime.transport_pool import (
    TransportPool,
    TransportSource,
    read_status,
    render_input,
    status_path,
)
from providers.base import Instance
from providers.ssh.errors import TransportError
from providers.ssh.transport import Transport

__all__ = ["COULD_NOT_START", "LAST_WORDS_CHARS", "LAST_WORDS_LINES", "SshMonitor", "report_from_status"]

#: Exit code reported when the agent could not start the job at all (the shell's "cannot execute").
COULD_NOT_START = 127


class SshMonitor(Monitor):
    """Reads the agent's status over the pooled transport.

    GPU utilization is reported only while the agent's heartbeat is fresh (a dead agent's last sample
    must not feed idle detection); notices, checkpoints and the exit code are facts and always reported.
    Checkpoints are the committed ones up to the store's LATEST, by step, so the engine's last recorded
    checkpoint is the one a restart restores.
    """

    def __init__(self, pool: TransportPool, node_settings: Mapping[str, NodeSettings] | None = None, *,
                 stale_s: float = 60.0, wall_clock: Callable[[], float] = time.time) -> None:
        self.pool = pool
        self.node_settings = dict(node_settings or {})
        self.stale_s = stale_s
        self.wall_clock = wall_clock

    def read(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> AgentReport | None:
        ri = render_input(job, attempt, instance, self.node_settings)
        try:
            t = self.pool.get(instance)
        except TransportError:
            return None
        status = read_status(t, status_path(ri))
        if status is None or (status.launch_id and status.launch_id != attempt.launch_id):
            return None     # another launch's status (an earlier one on this machine): not this attempt's facts
        report = report_from_status(status, self.wall_clock(), self.stale_s)
        if report.exit_code not in (None, 0):
            report = replace(report, last_words=_last_words(t, ri, status))
        return report

    def await_report(self, job: JobRecord, attempt: AttemptRecord, instance: Instance, why: WatchFor,
                     timeout_s: float) -> bool:
        """Wait ON THE NODE, in one exec, until the attempt's agent status says what ``why`` watches for (the
        wake watch's waiters: orchestrator/engine/wake.py), at most ``timeout_s``; True when it does. NOTICE:
        a notice that ends the attempt; COMMIT: the job stopped (exited, or drained) with no upload pending
        (``Draining.holds_successor``'s own rule). The node looks every ``AWAIT_STEP_S`` (a local read, no round
        trip); it decides nothing: the tick reads the status again. TransportError when it cannot be reached."""
        ri = render_input(job, attempt, instance, self.node_settings)
        t = self.pool.get(instance)
        advisory = ",".join(sorted(k.value for k in NoticeKind if not k.ends_attempt))
        stopped = ",".join(s.value for s in _STOPPED_STATES)
        args = " ".join(shlex.quote(a) for a in (status_path(ri), why.value, attempt.launch_id, advisory, stopped,
                                                  f"{timeout_s:g}", f"{AWAIT_STEP_S:g}"))
        res = t.exec(f"python3 -c {shlex.quote(_AWAIT_STATUS)} {args}", timeout=timeout_s + 15)
        return res.exit_code == 0

    def listens(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        """SSH-provider hosts always; a cloud machine only when orch has a key to reach it with."""
        return isinstance(self.pool.providers.get(instance.provider), TransportSource) or (
            self.pool.key_path is not None and self.pool.host_keys is not None)


#: The job states in which ``report_from_status`` gives an exit code: the job stopped (``Draining``'s rule).
_STOPPED_STATES = (JobState.EXITED, JobState.FAILED)
#: How often ``await_report``'s waiter on the node reads the agent's status file (a local read).
AWAIT_STEP_S = 0.05
#: ``await_report``'s waiter, run by the node's python3 (the agent's own interpreter; standard library only):
#: argv = status path, a WatchFor value ("notice"|"commit"), launch id, the advisory notice kinds and the job
#: states that mean it stopped (each comma-separated), the limit in seconds, the step. Exit 0 once the status
#: says it (another launch's status says nothing), 1 at the limit.
_AWAIT_STATUS = """
import json, sys, time
path, why, launch, advisory, stopped_states, limit, step = sys.argv[1:8]
advisory, stopped_states = set(advisory.split(",")), set(stopped_states.split(","))
end = time.monotonic() + float(limit)
while True:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        doc = None
    if isinstance(doc, dict) and doc.get("launch_id") in (None, "", launch):
        job = doc.get("job") or {}
        if why == "notice":
            hit = any(str(n.get("kind")) not in advisory for n in doc.get("notices") or [])
        else:
            stopped = job.get("state") in stopped_states or bool(job.get("drained"))
            hit = stopped and int(doc.get("pending_uploads") or 0) == 0
        if hit:
            sys.exit(0)
    if time.monotonic() >= end:
        sys.exit(1)
    time.sleep(float(step))
"""

#: How much of the node's words a failed attempt's reason carries.
LAST_WORDS_LINES = 8
LAST_WORDS_CHARS = 600


def _last_words(t: Transport, ri: RenderInput, status: AgentStatus) -> str:
    """The agent's errors and the last lines of job.log, as one line (" | " between lines), bounded."""
    lines = list(status.errors[-2:])
    log_path = shlex.quote(str(PurePosixPath(ri.resolved_work_dir) / "job.log"))
    try:
        res = t.exec(f"tail -n {LAST_WORDS_LINES} {log_path}", timeout=10)
        lines += [ln.strip() for ln in text_of(res.stdout).splitlines() if ln.strip()]
    except TransportError:
        pass
    text = " | ".join(lines)
    return text if len(text) <= LAST_WORDS_CHARS else "..." + text[-LAST_WORDS_CHARS:]


def report_from_status(status: AgentStatus, now: float, stale_s: float = 60.0) -> AgentReport:
    """The engine's view of one status document (pure; ``now`` is wall-clock seconds)."""
    util: tuple[float, ...] = ()
    if status.gpu_samples and now - status.heartbeat <= stale_s:
        util = tuple(g.util for g in status.gpu_samples[-1].gpus if g.util is not None)
    notice = None
    ending = [n for n in status.notices if n.kind.ends_attempt]   # advisories never end an attempt
    if ending:
        n = ending[-1]
        notice = Notice(n.cloud, n.kind, n.key, datetime.fromtimestamp(n.seen_at, UTC))
    latest_step = _step(status.latest)
    commits = sorted((c for c in status.checkpoints if latest_step is not None and c.step <= latest_step),
                     key=lambda c: c.step)
    exit_code = None
    if status.job.state is JobState.EXITED:
        exit_code = status.job.exit_code if status.job.exit_code is not None else COULD_NOT_START
    elif status.job.state is JobState.FAILED:
        exit_code = COULD_NOT_START
    advisories = tuple(Notice(n.cloud, n.kind, n.key, datetime.fromtimestamp(n.seen_at, UTC))
                       for n in status.advisories)
    return AgentReport(gpu_util_pct=util, notice=notice, advisories=advisories,
                       checkpoints=tuple((c.uri, c.step) for c in commits), exit_code=exit_code,
                       pending_uploads=status.pending_uploads, drained=status.drained,
                       heartbeat_at=datetime.fromtimestamp(status.heartbeat, UTC))


def _step(name: str | None) -> int | None:
    if not name or not name.startswith("step-") or not name[5:].isdigit():
        return None
    return int(name[5:])
