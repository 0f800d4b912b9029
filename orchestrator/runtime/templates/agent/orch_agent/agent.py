"""The agent: waits for orch's go (``start.json`` in its report prefix when booted by its user data, or a go
file when started ahead of it over SSH), starts the job, and does rounds until the job has exited."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile

from .codepack import unpack_code
from .files import atomic_write
from .rounds import Rounds

#: How often an agent started ahead of its go looks for the go file (a local stat): the go's latency.
GO_POLL_S = 0.02


class Agent(Rounds):
    """One node's agent. ``tick()`` does one round; ``run()`` loops until the job has exited.

    Injectable for tests (``AgentBase``'s constructor): ``clock`` (seconds), ``sampler`` (GpuSampler), ``poller``
    (has ``poll()``), ``store`` (Store), ``sleep``.
    """

    @property
    def waits_for_start(self) -> bool:
        return self.reporter is not None and bool((self.config.get("report") or {}).get("wait_for_start"))

    def wait_for_start(self) -> None:
        """Booted by its user data, the node reports itself (job pending) and starts the job only once orch
        has put ``start.json`` beside its status: orch decides when (after a noticed predecessor committed its
        last checkpoint; a gang's node 0 first), as it does over SSH, with no inbound connection."""
        assert self.reporter is not None
        while not self.reporter.store.has("start.json"):
            self.tick()
            self.sleep(min(self.sample_interval, self.notice_interval, 1.0))

    def start_env(self) -> dict[str, str]:
        """What orch's go adds to the job's environment: node 0's address for a gang's rank > 0 booted before
        node 0 existed (its startup.sh reads ``ORCH_MASTER_ADDR_GIVEN``)."""
        assert self.reporter is not None
        try:
            go = json.loads(self.reporter.store.read_object("start.json") or b"{}")
        except (OSError, ValueError) as exc:
            self._error("start", exc)
            return {}
        addr = go.get("master_addr") if isinstance(go, dict) else None
        env = {"ORCH_MASTER_ADDR_GIVEN": str(addr)} if addr else {}
        if (self.config.get("report") or {}).get("secrets"):
            # The job's secrets, put by orch beside the go under this job's scoped prefix: into the job's
            # environment only (this process's memory, never a file on the node).
            try:
                secrets = json.loads(self.reporter.store.read_object("secrets.json") or b"{}")
            except (OSError, ValueError) as exc:
                self._error("secrets", exc)
                secrets = {}
            try:
                # Read once: no copy stays in the store (orch deletes it too once the job runs; either suffices).
                self.reporter.store.delete_object("secrets.json")
            except (OSError, subprocess.SubprocessError) as exc:
                self._error("secrets cleanup", exc)
            if isinstance(secrets, dict):
                env.update({str(k): str(v) for k, v in secrets.items()})
        return env

    def await_go(self, go_file: str) -> None:
        """Started ahead of its go: unpack the code now (``start_job`` then finds it unpacked), say so in the
        status (job pending, ``awaits_go``; ``<go_file>.wait`` holds this pid for orch's go, which checks the
        agent is there before it waits on it) and return once ``go_file`` exists, looked for every
        ``GO_POLL_S``; the status is rewritten (heartbeat) once per round meanwhile. Nothing else runs while
        it waits: no job, so no notice to pass on and no checkpoint of this launch's to upload."""
        code = self.config.get("code")
        if code:
            try:
                unpack_code(code, ".")
            except (OSError, ValueError, tarfile.TarError):
                pass        # start_job unpacks again and reports it where orch reads it
        self.awaiting_go = True
        atomic_write(f"{go_file}.wait", f"{os.getpid()}\n")
        next_beat = 0.0
        while not os.path.exists(go_file):
            now = self.clock()
            if now >= next_beat:
                self.write_status()
                next_beat = now + self.round_pause()
            self.sleep(GO_POLL_S)
        self.awaiting_go = False

    def run(self, go_file: str | None = None) -> int:
        """Start the job (at once, after ``start.json`` when booted by its user data, or after ``go_file``
        appears) and tick until it has exited; a last tick uploads what it wrote at the end."""
        env: dict[str, str] = {}
        if self.waits_for_start:
            self.wait_for_start()
            env = self.start_env()
        elif go_file:
            self.await_go(go_file)
        self.start_job(env)
        # Said at once (before the first round samples GPUs and polls notices): orch's start waits for it.
        self.write_status()
        if go_file:
            # Taken: the go's waiter (bootstrap.go) sees the go file gone, then reads the status just written.
            for path in (f"{go_file}.wait", go_file):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        while not self.job_done:
            self.tick()
            self.sleep(self.round_pause())
        self.tick()
        self.final_report()
        return 0
