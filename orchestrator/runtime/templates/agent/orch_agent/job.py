"""The agent's job layer: starts the job in a process group of its own (after its code pack is unpacked),
records its pid and exit code, and signals its whole process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import tarfile

from .base import AgentBase
from .codepack import unpack_code
from .files import append_log
from .proctree import signal_tree


class JobControl(AgentBase):
    """Supervises the job's process (``proc``) and keeps ``job`` (its state, pid, exit code, times)."""

    def start_job(self, env: dict[str, str] | None = None) -> None:
        code = self.config.get("code")
        if code:
            try:
                unpack_code(code, ".")
            except (OSError, ValueError, tarfile.TarError) as exc:
                # The node's own words, where `orch events` shows them: the job never starts without its code.
                self.job.update(state="failed", ended_at=self.clock())
                self._error("code", exc)
                append_log(self.config.get("job_log", "job.log"), f"orch: code pack: {exc}\n")
                return
        argv = self.config["command"]
        log = open(self.config.get("job_log", "job.log"), "ab")  # noqa: SIM115 - owned by the child
        try:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, env={**os.environ, **(env or {})})
        except OSError as exc:
            self.job.update(state="failed", ended_at=self.clock())
            self._error("start", exc)
            return
        finally:
            log.close()
        self.job.update(state="running", pid=self.proc.pid, started_at=self.clock())

    def _poll_job(self) -> None:
        if self.proc is None or self.job["state"] != "running":
            return
        code = self.proc.poll()
        if code is not None:
            self.job.update(state="exited", exit_code=code, ended_at=self.clock())

    @property
    def job_done(self) -> bool:
        return self.job["state"] in ("exited", "failed")

    def stop_job(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.job["state"] == "running":
            signal_tree(self.proc.pid, sig)
