"""The engine's Bootstrapper and Monitor over SSH: start a job on a machine, read its agent back.

* ``TransportPool``: ONE kept-alive transport per instance, shared by both hooks. SSH-provider hosts
  use ``SshProvider.transport(id)`` (configured key, pinned host key); cloud instances get an
  ``SshTransport`` to ``public_ip:ssh_port`` as ``ssh_user`` with orch's key, pinned to the keys the
  provider's API exposes (``Instance.host_keys``) or, where it exposes none, recorded on first contact.
* ``SshBootstrapper``: renders the job's typed manifest (``JobRecord.manifest``) with the attempt's facts
  (node rank, launch id, the checkpoint the store expects to restore) and the machine's (``NodeSettings``:
  the cloud whose metadata the agent polls, metadata URL overrides, master port) through
  ``orchestrator.runtime.from_manifest.render_input_for`` (``node_facts.launch_facts``) and runs
  ``orchestrator.runtime.bootstrap.bootstrap``. Idempotent: an agent this launch already started is
  found (its ``startup.sh`` carries ``ORCH_LAUNCH_ID``; its status is present and fresh or its pid
  alive) and not started twice. Returns False while SSH does not answer yet. Secret values are read
  from this process's environment by NAME at launch and never stored.
* ``SshMonitor``: reads the agent's status file and turns it into the engine's ``AgentReport``.
  Unreachable or unreadable: None (the engine then relies on the provider's own state).

docs/e2e.md shows them driving the engine end to end.
"""

from __future__ import annotations

import logging
import os
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import Protocol, runtime_checkable

from orchestrator.engine.hooks import AgentReport, Bootstrapper, Monitor, Notice
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.runtime.bootstrap import GO_FILE_NAME, Go, bootstrap, give_go
from orchestrator.runtime.bootstrap import stage as stage_files
from orchestrator.runtime.codepack import pack_bytes
from orchestrator.runtime.from_manifest import render_input_for
from orchestrator.runtime.node_facts import NodeSettings, launch_facts, node_settings_for
from orchestrator.runtime.render_input import RenderInput
from orchestrator.runtime.status import AgentStatus, JobState, StatusFormatError, parse_status
from providers.base import Instance, Provider
from providers.ssh.errors import TransportError
from providers.ssh.hostkeys import HostKeyStore, HostTrust
from providers.ssh.transport import SshTransport, Transport

__all__ = ["SshBootstrapper", "SshMonitor", "TransportPool", "report_from_status"]

log = logging.getLogger("orch.runtime.hooks")

#: Exit code reported when the agent could not start the job at all (the shell's "cannot execute").
COULD_NOT_START = 127


def _render_input(job: JobRecord, attempt: AttemptRecord, instance: Instance,
                  table: Mapping[str, NodeSettings]) -> RenderInput:
    """The attempt's RenderInput on this machine: the job's manifest plus the launch's and machine's facts."""
    node = node_settings_for(table, instance.provider, instance.instance_id)
    facts = launch_facts(job, attempt, node, table.get(attempt.master_key or ""), fabric=instance.fabric)
    return render_input_for(job.manifest, facts)


def _status_path(ri: RenderInput) -> str:
    sp = ri.agent.status_path
    return sp if sp.startswith("/") else str(PurePosixPath(ri.resolved_work_dir) / sp)


class _Found(Enum):
    NONE = "none"
    STARTED = "started"
    AWAITING = "awaiting"


@runtime_checkable
class TransportSource(Protocol):
    """A provider that knows how to reach its own instances (the SSH provider)."""

    def transport(self, instance_id: str) -> SshTransport: ...


class TransportPool:
    """One transport per (provider, instance id), created on first use and kept alive."""

    def __init__(self, providers: Mapping[str, Provider], *, key_path: Path | None = None,
                 host_keys: HostKeyStore | None = None, connect_timeout_s: float = 10.0,
                 reconnect_deadline_s: float = 5.0) -> None:
        self.providers = providers
        self.key_path = key_path
        self.host_keys = host_keys
        self.connect_timeout_s = connect_timeout_s
        self.reconnect_deadline_s = reconnect_deadline_s
        self._lock = threading.Lock()
        self._pool: dict[tuple[str, str], Transport] = {}

    def get(self, instance: Instance) -> Transport:
        key = (instance.provider, instance.instance_id)
        with self._lock:
            found = self._pool.get(key)
            if found is None:
                found = self._pool[key] = self._make(instance)
            return found

    def _make(self, instance: Instance) -> Transport:
        provider = self.providers.get(instance.provider)
        if isinstance(provider, TransportSource):
            return provider.transport(instance.instance_id)
        if not instance.public_ip:
            raise TransportError(f"{instance.provider} {instance.instance_id} has no public address yet")
        if self.key_path is None or self.host_keys is None:
            raise TransportError("no SSH key / host key store configured for cloud instances")
        # Keys from the provider's API are pinned; without any, the first key seen is recorded and enforced.
        trust = HostTrust(keys=instance.host_keys, allow_first_contact=not instance.host_keys)
        return SshTransport(instance.public_ip, instance.ssh_port, instance.ssh_user, key_path=self.key_path,
                            host_keys=self.host_keys, trust=trust, connect_timeout=self.connect_timeout_s,
                            reconnect_deadline_s=self.reconnect_deadline_s)

    def drop(self, instance: Instance) -> None:
        with self._lock:
            t = self._pool.pop((instance.provider, instance.instance_id), None)
        if t is not None:
            t.close()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, {}
        for t in pool.values():
            t.close()


def _text(v: str | bytes) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _read_status(t: Transport, path: str) -> AgentStatus | None:
    try:
        return parse_status(t.get(path))
    except (TransportError, StatusFormatError):
        return None


class SshBootstrapper(Bootstrapper):
    """Starts the job over SSH (see the module docstring). ``environ``: where secret values come from."""

    def __init__(self, pool: TransportPool, node_settings: Mapping[str, NodeSettings] | None = None, *,
                 environ: Mapping[str, str] | None = None, probe_timeout_s: float = 10.0,
                 status_deadline_s: float = 60.0, fresh_s: float = 30.0,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.pool = pool
        self.node_settings = dict(node_settings or {})
        self.environ = environ if environ is not None else os.environ
        self.probe_timeout_s = probe_timeout_s
        self.status_deadline_s = status_deadline_s
        self.fresh_s = fresh_s
        self.wall_clock = wall_clock
        self._staged: set[str] = set()     # launch ids whose files ``stage`` put on their machine
        self._staging: dict[str, threading.Thread] = {}
        self._stage_lock = threading.Lock()

    def stage(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        """Put the launch's files on its machine and start its agent ahead of its go (``prestart``: it
        unpacks the code and waits, job pending), while the replacement waits for a noticed machine's commit
        (the start step calls it then), on a thread of its own so the tick is not held up: the later
        ``start`` joins it and then only gives the go (``give_go``, one exec). True once staged; False while
        staging (or unreachable: it is tried again at the next call, and ``start`` does it all itself when
        nothing was staged)."""
        launch = attempt.launch_id
        if attempt.node_rank != 0:
            return False    # rendered with node 0's address, known only at its start: the start does it all
        with self._stage_lock:
            if launch in self._staged:
                return True
            running = self._staging.get(launch)
            if running is not None and running.is_alive():
                return False
            thread = threading.Thread(target=self._stage_now, args=(job, attempt, instance), daemon=True,
                                      name=f"orch-stage-{launch}")
            self._staging[launch] = thread
        thread.start()
        return False

    def join_stage(self, launch_id: str, timeout: float | None = None) -> bool:
        """Wait for a staging of ``launch_id`` in progress (if any); True when its files are staged."""
        with self._stage_lock:
            thread = self._staging.pop(launch_id, None)
        if thread is not None:
            thread.join(timeout)
        with self._stage_lock:
            return launch_id in self._staged

    def _stage_now(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> None:
        ri = _render_input(job, attempt, instance, self.node_settings)
        try:
            t = self.pool.get(instance)
            found = self._found(t, ri, attempt.launch_id)   # the probe; also moves another launch's status aside
            if found is _Found.STARTED:
                return
            if found is _Found.NONE:
                # The files and the agent's start ahead of its go, in one exec; the go waits on the node for
                # the agent to take it (its pid is recorded at once), so nothing here waits for its Python.
                stage_files(t, ri, self._secrets(ri), code_pack=self._pack(job, ri), prestart=True)
        except TransportError as exc:
            log.info("stage %s: %s %s not reachable: %s", attempt.launch_id, instance.provider,
                     instance.instance_id, exc)
            return
        except Exception:  # a thread of its own: logged here; the start uploads itself
            log.exception("stage %s failed", attempt.launch_id)
            return
        with self._stage_lock:
            self._staged.add(attempt.launch_id)

    def _secrets(self, ri: RenderInput) -> dict[str, str]:
        # Values by name, read now, handed to bootstrap (which writes a 0600 file the start deletes).
        return {name: self.environ[name] for name in ri.secrets if name in self.environ}

    @staticmethod
    def _pack(job: JobRecord, ri: RenderInput) -> bytes | None:
        # The pack pinned at apply (the same bytes for every node and every relaunch); CodePackError if gone.
        return pack_bytes(job.manifest.code) if ri.code is not None and job.manifest.code else None

    def start(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        # Staged by this process while it waited: its agent waits for the go, the only step left (one exec).
        # Otherwise (not staged, or its agent is gone): probe, find a started or waiting agent of this launch
        # (a restarted daemon remembers nothing), else upload and start. Joined first: one transport user.
        staged = self.join_stage(attempt.launch_id, self.status_deadline_s)
        ri = _render_input(job, attempt, instance, self.node_settings)
        try:
            t = self.pool.get(instance)
            if staged and (went := self._go(t, ri, attempt.launch_id)) is not None:
                return went
            found = self._found(t, ri, attempt.launch_id)       # the probe too
            if found is _Found.STARTED:
                return True
            if found is _Found.AWAITING and (went := self._go(t, ri, attempt.launch_id)) is not None:
                return went
            # Uploads again (a pre-started agent consumed the secrets file): uploads overwrite.
            bootstrap(t, ri, self._secrets(ri), ssh_deadline_s=self.probe_timeout_s,
                      status_deadline_s=self.status_deadline_s, code_pack=self._pack(job, ri), reachable=True)
            with self._stage_lock:
                self._staged.discard(attempt.launch_id)
        except TransportError as exc:
            # Not reachable yet, or lost mid-way: the next tick retries (and finds a started agent).
            log.info("bootstrap %s: %s %s not reachable: %s", attempt.launch_id, instance.provider,
                     instance.instance_id, exc)
            return False
        return True

    def _go(self, t: Transport, ri: RenderInput, launch_id: str) -> bool | None:
        """Give the go to this launch's agent waiting for it: True once its job started, False when the agent
        has not taken it yet (asked again next tick), None when no agent waits (start one)."""
        went, _ = give_go(t, ri, self.status_deadline_s)
        if went is Go.TAKEN:
            with self._stage_lock:
                self._staged.discard(launch_id)
            return True
        return False if went is Go.NOT_YET else None

    def _found(self, t: Transport, ri: RenderInput, launch_id: str) -> _Found:
        """Whether this launch's agent is on the machine: STARTED (running, or its job already ended),
        AWAITING (started ahead of its go, job pending) or NONE.

        A status file left by ANOTHER launch of the same job is moved aside: a new agent would otherwise
        reload its notices and checkpoints as its own (and report the old notice as a new one).
        """
        work = ri.resolved_work_dir
        status_path = _status_path(ri)
        mark = shlex.quote(f"ORCH_LAUNCH_ID={launch_id}")
        # One exec (also the probe: it raises TransportError when the machine does not answer): whether the
        # launch's startup.sh is there, then the status file as it is.
        wait = shlex.quote(str(PurePosixPath(work) / f"{GO_FILE_NAME}.wait"))
        res = t.exec(f"if grep -qsF {mark} {shlex.quote(str(PurePosixPath(work) / 'startup.sh'))}; then echo ours; "
                     f"else echo other; fi; if [ -f {wait} ] && kill -0 \"$(cat {wait})\" 2>/dev/null; then "
                     f"echo waiting; else echo none; fi; cat {shlex.quote(status_path)} 2>/dev/null; true",
                     timeout=self.probe_timeout_s)
        if res.exit_code != 0:
            raise TransportError(f"the machine's shell answered {res.exit_code}: {_text(res.stderr)[-200:]}")
        head, waiting, body = ([*_text(res.stdout).split("\n", 2), "", ""])[:3]
        ours = head.strip() == "ours"
        try:
            status: AgentStatus | None = parse_status(body) if body.strip() else None
        except StatusFormatError:
            status = None
        if not ours:
            if status is not None:
                q = shlex.quote(status_path)
                t.exec(f"mv -f {q} {q}.previous", timeout=self.probe_timeout_s)
            return _Found.NONE
        if waiting.strip() == "waiting" and (status is None or status.job.state is JobState.PENDING):
            return _Found.AWAITING      # started ahead of its go, maybe still starting its Python
        if status is None:
            return _Found.NONE
        if status.job.state is JobState.PENDING and status.awaits_go:
            return _Found.AWAITING      # give_go checks it is alive
        if status.job.state in (JobState.EXITED, JobState.FAILED):
            return _Found.STARTED
        if self.wall_clock() - status.heartbeat <= self.fresh_s:
            return _Found.STARTED
        alive = t.exec(f"kill -0 {int(status.agent_pid)}", timeout=self.probe_timeout_s)
        return _Found.STARTED if alive.exit_code == 0 else _Found.NONE


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
        ri = _render_input(job, attempt, instance, self.node_settings)
        try:
            t = self.pool.get(instance)
        except TransportError:
            return None
        status = _read_status(t, _status_path(ri))
        if status is None or (status.launch_id and status.launch_id != attempt.launch_id):
            return None     # another launch's status (an earlier one on this machine): not this attempt's facts
        report = report_from_status(status, self.wall_clock(), self.stale_s)
        if report.exit_code not in (None, 0):
            report = replace(report, last_words=_last_words(t, ri, status))
        return report


#: How much of the node's words a failed attempt's reason carries.
LAST_WORDS_LINES = 8
LAST_WORDS_CHARS = 600


def _last_words(t: Transport, ri: RenderInput, status: AgentStatus) -> str:
    """The agent's errors and the last lines of job.log, as one line (" | " between lines), bounded."""
    lines = list(status.errors[-2:])
    log_path = shlex.quote(str(PurePosixPath(ri.resolved_work_dir) / "job.log"))
    try:
        res = t.exec(f"tail -n {LAST_WORDS_LINES} {log_path}", timeout=10)
        out = res.stdout.decode("utf-8", "replace") if isinstance(res.stdout, bytes) else res.stdout
        lines += [ln.strip() for ln in out.splitlines() if ln.strip()]
    except TransportError:
        pass
    text = " | ".join(lines)
    return text if len(text) <= LAST_WORDS_CHARS else "..." + text[-LAST_WORDS_CHARS:]

    def listens(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        """SSH-provider hosts always; a cloud machine only when orch has a key to reach it with."""
        return isinstance(self.pool.providers.get(instance.provider), TransportSource) or (
            self.pool.key_path is not None and self.pool.host_keys is not None)


def report_from_status(status: AgentStatus, now: float, stale_s: float = 60.0) -> AgentReport:
    """The engine's view of one status document (pure; ``now`` is wall-clock seconds)."""
    util: tuple[float, ...] = ()
    if status.gpu_samples and now - status.heartbeat <= stale_s:
        util = tuple(g.util for g in status.gpu_samples[-1].gpus if g.util is not None)
    notice = None
    ending = [n for n in status.notices if n.kind.ends_attempt]   # advisories never end an attempt
    if ending:
        n = ending[-1]
        notice = Notice(n.cloud, n.kind.value, n.key, datetime.fromtimestamp(n.seen_at, UTC))
    latest_step = _step(status.latest)
    commits = sorted((c for c in status.checkpoints if latest_step is not None and c.step <= latest_step),
                     key=lambda c: c.step)
    exit_code = None
    if status.job.state is JobState.EXITED:
        exit_code = status.job.exit_code if status.job.exit_code is not None else COULD_NOT_START
    elif status.job.state is JobState.FAILED:
        exit_code = COULD_NOT_START
    advisories = tuple(Notice(n.cloud, n.kind.value, n.key, datetime.fromtimestamp(n.seen_at, UTC))
                       for n in status.advisories)
    return AgentReport(gpu_util_pct=util, notice=notice, advisories=advisories,
                       checkpoints=tuple((c.uri, c.step) for c in commits), exit_code=exit_code,
                       pending_uploads=status.pending_uploads, drained=status.drained,
                       heartbeat_at=datetime.fromtimestamp(status.heartbeat, UTC))


def _step(name: str | None) -> int | None:
    if not name or not name.startswith("step-") or not name[5:].isdigit():
        return None
    return int(name[5:])
