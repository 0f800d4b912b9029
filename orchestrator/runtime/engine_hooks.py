"""The engine's Bootstrapper over SSH: start a job on a machine (the Monitor is ``ssh_monitor``, the shared
transports ``transport_pool``).

``SshBootstrapper`` renders the job's typed manifest (``JobRecord.manifest``) with the attempt's facts (node
rank, launch id, the checkpoint the store expects to restore) and the machine's (``NodeSettings``: the cloud
whose metadata the agent polls, metadata URL overrides, master port) through
``orchestrator.runtime.from_manifest.render_input_for`` (``node_facts.launch_facts``) and runs
``orchestrator.runtime.bootstrap.bootstrap``. Idempotent: an agent this launch already started is found (its
``startup.sh`` carries ``ORCH_LAUNCH_ID``; its status is present and fresh or its pid alive) and not started
twice. Returns False while SSH does not answer yet. Secret values are read from this process's environment by
NAME at launch and never stored.

docs/e2e.md shows the hooks driving the engine end to end.
"""

from __future__ import annotations

import logging
import os
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import PurePosixPath

from orchestrator.engine.hooks import Bootstrapper
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.runtime.bootstrap import GO_FILE_NAME, Go, bootstrap, give_go, text_of
from orchestrator.runtime.bootstrap import stage as stage_files
from orchestrator.runtime.codepack import pack_bytes
from orchestrator.runtime.node_facts import NodeSettings
from orchestrator.runtime.render_input import RenderInput
from orchestrator.runtime.status import AgentStatus, JobState, StatusFormatError, parse_status
from orchestrator.runtime.transport_pool import TransportPool, render_input, status_path
from providers.base import Instance
from providers.ssh.errors import TransportError
from providers.ssh.transport import Transport

__all__ = ["SshBootstrapper"]

log = logging.getLogger("orch.runtime.hooks")


class _Found(Enum):
    NONE = "none"
    STARTED = "started"
    AWAITING = "awaiting"


class _Stage(Enum):
    """Where a launch's staging stands once a start has waited for it."""

    NONE = "none"          # none ran, or it could not stage: the start does it all
    STAGED = "staged"      # its files are there and its agent waits for the go
    STAGING = "staging"    # still running: the start must not run beside it



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
        return self._join(launch_id, timeout) is _Stage.STAGED

    def _join(self, launch_id: str, timeout: float | None) -> _Stage:
        """Wait at most ``timeout`` for a staging of ``launch_id`` in progress. One still running then stays
        registered: the next call joins it again, and ``stage`` starts no second one beside it."""
        with self._stage_lock:
            thread = self._staging.get(launch_id)
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                return _Stage.STAGING
            with self._stage_lock:
                if self._staging.get(launch_id) is thread:
                    del self._staging[launch_id]
        with self._stage_lock:
            return _Stage.STAGED if launch_id in self._staged else _Stage.NONE

    def _stage_now(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> None:
        ri = render_input(job, attempt, instance, self.node_settings)
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
        # (a restarted daemon remembers nothing), else upload and start. Joined first: one transport user. A
        # staging that outlasts the wait (a big code pack on a slow link) is not raced: beside it, the probe
        # finds no agent yet and the upload starts a second agent of the launch. The next tick asks again.
        stage = self._join(attempt.launch_id, self.status_deadline_s)
        if stage is _Stage.STAGING:
            log.info("start %s: its staging still runs; started at a later tick", attempt.launch_id)
            return False
        staged = stage is _Stage.STAGED
        ri = render_input(job, attempt, instance, self.node_settings)
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
        status_file = status_path(ri)
        mark = shlex.quote(f"ORCH_LAUNCH_ID={launch_id}")
        # One exec (also the probe: it raises TransportError when the machine does not answer): whether the
        # launch's startup.sh is there, then the status file as it is.
        wait = shlex.quote(str(PurePosixPath(work) / f"{GO_FILE_NAME}.wait"))
        res = t.exec(f"if grep -qsF {mark} {shlex.quote(str(PurePosixPath(work) / 'startup.sh'))}; then echo ours; "
                     f"else echo other; fi; if [ -f {wait} ] && kill -0 \"$(cat {wait})\" 2>/dev/null; then "
                     f"echo waiting; else echo none; fi; cat {shlex.quote(status_file)} 2>/dev/null; true",
                     timeout=self.probe_timeout_s)
        if res.exit_code != 0:
            raise TransportError(f"the machine's shell answered {res.exit_code}: {text_of(res.stderr)[-200:]}")
        head, waiting, body = ([*text_of(res.stdout).split("\n", 2), "", ""])[:3]
        ours = head.strip() == "ours"
        try:
            status: AgentStatus | None = parse_status(body) if body.strip() else None
        except StatusFormatError:
            status = None
        if not ours:
            if status is not None:
                q = shlex.quote(status_file)
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

