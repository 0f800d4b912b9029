"""The engine's Monitor and Bootstrapper over the report store: outbound-only nodes, read each tick.

A node's agent writes ``<job state>/<launch id>/status.json`` (orchestrator/runtime/node_state.py); the
``StoreMonitor`` reads that one object per live attempt per tick and turns it into the engine's
``AgentReport`` exactly as the SSH monitor does (``report_from_status``: the same ``AgentStatus`` shape, its
``heartbeat`` the agent's clock at the write). The ``StoreBootstrapper`` starts nothing (the machine's boot
script did): it says a job is started once its agent has reported the job running (or ended).

``CombinedMonitor`` reads the store first and, where it has nothing, a second channel (SSH). The
``RoutingBootstrapper`` sends SSH-provider hosts, and cloud jobs with no store to report to when orch has an
SSH key, to the SSH bootstrapper; every other cloud machine started itself (``starts_by_boot``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from orchestrator.engine.hooks import AgentReport, Bootstrapper, Monitor
from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.runtime.codepack import CodePackError, pack_bytes, pack_file_name
from orchestrator.runtime.node_credentials import SECRETS_OBJECT
from orchestrator.runtime.node_facts import NodeSettings, node_settings_for
from orchestrator.runtime.node_renewal import CredentialRenewer, put_secrets
from orchestrator.runtime.node_state import (
    CHECKPOINT_NOW_OBJECT,
    LOGS_DIR,
    START_OBJECT,
    STATUS_OBJECT,
    job_state_uri,
    launch_state_uri,
)
from orchestrator.runtime.objectstore import StoreAccessError, StoreClient, UnsupportedStoreError, parse_store
from orchestrator.runtime.ssh_monitor import LAST_WORDS_CHARS, LAST_WORDS_LINES, report_from_status
from orchestrator.runtime.status import AgentStatus, JobState, StatusFormatError, parse_status
from providers.base import Instance

__all__ = ["CombinedMonitor", "RoutingBootstrapper", "StoreBootstrapper", "StoreMonitor", "StoreReader",
           "starts_by_boot"]

log = logging.getLogger("orch.runtime.store")

#: Providers whose machines orch starts over SSH (their user data is never run).
SSH_STARTED = frozenset({"ssh"})


def starts_by_boot(provider: str, has_store: bool, ssh_key: bool) -> bool:
    """Whether a machine of ``provider`` starts its job from its boot script (else over SSH): every cloud
    machine does, except, when orch has an SSH key, one whose job has no store to report to."""
    return provider not in SSH_STARTED and (has_store or not ssh_key)


class StoreReader:
    """Reads a launch's status object. ``node_settings``: per provider, the store endpoint (S3-compatible
    stores); ``state_store``: the daemon-wide store of jobs without a checkpoint store."""

    def __init__(self, node_settings: Mapping[str, NodeSettings] | None = None, *, state_store: str = "",
                 environ: Mapping[str, str] | None = None, renewer: CredentialRenewer | None = None) -> None:
        self.node_settings = dict(node_settings or {})
        self.state_store = state_store
        self.environ = dict(environ if environ is not None else os.environ)
        #: Renews the nodes' short-lived store credentials through the store (None: nothing to renew).
        self.renewer = renewer

    def has_store(self, job: JobRecord, attempt: AttemptRecord) -> bool:
        return launch_state_uri(job.manifest, attempt.launch_id, self.state_store) is not None

    def client(self, job: JobRecord, attempt: AttemptRecord) -> StoreClient | None:
        return self._client_at(launch_state_uri(job.manifest, attempt.launch_id, self.state_store), attempt)

    def job_client(self, job: JobRecord, attempt: AttemptRecord) -> StoreClient | None:
        """The job's report prefix (above every launch's): where its code pack goes, once."""
        return self._client_at(job_state_uri(job.manifest, self.state_store), attempt)

    def _client_at(self, uri: str | None, attempt: AttemptRecord) -> StoreClient | None:
        """A client of ``uri`` as the attempt's provider reaches the store; None without a usable store."""
        if uri is None:
            return None
        endpoint = node_settings_for(self.node_settings, attempt.offer.provider).store_endpoint
        try:
            return StoreClient(parse_store(uri, endpoint), environ=self.environ)
        except UnsupportedStoreError:
            return None

    def status(self, job: JobRecord, attempt: AttemptRecord) -> AgentStatus | None:
        """The launch's last reported status; None when there is none yet or it cannot be read now."""
        client = self.client(job, attempt)
        if client is None:
            return None
        try:
            data = client.get(STATUS_OBJECT)
        except StoreAccessError as exc:
            log.info("status of launch %s not readable: %s", attempt.launch_id, exc)
            return None
        if data is None:
            return None
        try:
            return parse_status(data)
        except StatusFormatError as exc:
            log.warning("status of launch %s: %s", attempt.launch_id, exc)
            return None


class StoreMonitor(Monitor):
    """The agent's report from the store (see the module docstring). GPU utilization only while the
    heartbeat is fresh (``stale_s``); notices, checkpoints and the exit code always."""

    def __init__(self, reader: StoreReader, *, stale_s: float = 60.0,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.reader = reader
        self.stale_s = stale_s
        self.wall_clock = wall_clock

    def read(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> AgentReport | None:
        status = self.reader.status(job, attempt)
        if status is None:
            return None
        if self.reader.renewer is not None and (client := self.reader.client(job, attempt)) is not None:
            self.reader.renewer.renew(job, attempt, client)    # a live node's credential, before it expires
        report = report_from_status(status, self.wall_clock(), self.stale_s)
        if report.exit_code not in (None, 0):
            report = replace(report, last_words=self._last_words(job, attempt, status))
        return report

    def _last_words(self, job: JobRecord, attempt: AttemptRecord, status: AgentStatus) -> str:
        """On a failed exit, the node's own words, as the SSH monitor gives them: the agent's last errors and
        the last lines of the job's shipped output (its last chunk), as one bounded line."""
        lines = list(status.errors[-2:])
        client = self.reader.client(job, attempt)
        try:
            chunks = sorted(n for n in client.list(LOGS_DIR) if n.isdigit()) if client is not None else []
            tail = (client.get(f"{LOGS_DIR}/{chunks[-1]}") or b"") if client is not None and chunks else b""
        except StoreAccessError:
            tail = b""
        lines += [ln.strip() for ln in tail.decode("utf-8", "replace").splitlines() if ln.strip()][-LAST_WORDS_LINES:]
        text = " | ".join(lines)
        return text if len(text) <= LAST_WORDS_CHARS else "..." + text[-LAST_WORDS_CHARS:]

    def listens(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        """A job with a checkpoint store or the daemon's ``state_store`` reports there."""
        return self.reader.has_store(job, attempt)


class StoreBootstrapper(Bootstrapper):
    """Starts a job on a machine that booted itself: once its agent has reported (job pending), puts
    ``start.json`` in its report prefix, the agent's go; True once the agent reports the job started (running,
    or already ended). Called by the start step only when the job may start (a noticed predecessor has
    committed its last checkpoint; a gang's node 0 first), so that decision stays the engine's. Idempotent: a
    second put writes the same object again."""

    def __init__(self, reader: StoreReader, wall_clock: Callable[[], float] = time.time) -> None:
        self.reader = reader
        self.wall_clock = wall_clock

    def start(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        status = self.reader.status(job, attempt)
        if status is None:
            return False                 # not booted yet (or not readable now): the next tick asks again
        client = self.reader.client(job, attempt)
        if status.job.state is not JobState.PENDING:
            if client is not None and job.manifest.secrets:
                try:
                    client.delete(SECRETS_OBJECT)   # read by the agent at its start: no copy stays in the store
                except StoreAccessError as exc:
                    log.info("secrets of launch %s not removed yet: %s", attempt.launch_id, exc)
            return True
        if client is None or not self._ship_code(job, attempt):
            return False
        if self.reader.renewer is not None and not self.reader.renewer.renew(job, attempt, client):
            return False
        if not self._secrets(job, attempt, client):
            return False
        go = {"launch_id": attempt.launch_id, "at": self.wall_clock(), "master_addr": attempt.master_addr}
        try:
            client.put(START_OBJECT, json.dumps(go, sort_keys=True).encode() + b"\n")
        except StoreAccessError as exc:
            log.info("start of launch %s not written: %s", attempt.launch_id, exc)
        return False

    def ask_checkpoint(self, job: JobRecord, attempt: AttemptRecord, instance: Instance, reason: str) -> bool:
        """Put ``checkpoint-now.json`` in the launch's report prefix (the agent polls it with the cloud's
        notices): True once written."""
        client = self.reader.client(job, attempt)
        if client is None:
            return False
        ask = {"launch_id": attempt.launch_id, "at": self.wall_clock(), "reason": reason}
        try:
            client.put(CHECKPOINT_NOW_OBJECT, json.dumps(ask, sort_keys=True).encode() + b"\n")
        except StoreAccessError as exc:
            log.info("checkpoint-now of launch %s not written: %s", attempt.launch_id, exc)
            return False
        return True

    def _secrets(self, job: JobRecord, attempt: AttemptRecord, client: StoreClient) -> bool:
        """The job's secrets beside the go, under the job's scoped prefix (not in the boot payload)."""
        return put_secrets(job, attempt, client, self.reader.environ)

    def _ship_code(self, job: JobRecord, attempt: AttemptRecord) -> bool:
        """Put the job's pinned code pack in its store, once (content-addressed: a pack already there is the
        same bytes), before the go: the agent fetches and unpacks it before setup. True when it is there."""
        code = job.manifest.code
        if code is None or code.pin is None:
            return True
        client = self.reader.job_client(job, attempt)
        if client is None:
            return False
        name = pack_file_name(code.pin)
        try:
            if name not in client.list("code"):
                client.put(f"code/{name}", pack_bytes(code))
        except (StoreAccessError, CodePackError) as exc:
            log.warning("code pack of launch %s not shipped: %s", attempt.launch_id, exc)
            return False
        return True


class CombinedMonitor(Monitor):
    """The store first; where it has nothing for a machine, the second channel (SSH), if any."""

    def __init__(self, first: Monitor, second: Monitor | None = None) -> None:
        self.first = first
        self.second = second

    def read(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> AgentReport | None:
        report = self.first.read(job, attempt, instance)
        if report is None and self.second is not None:
            report = self.second.read(job, attempt, instance)
        return report

    def listens(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        return self.first.listens(job, attempt, instance) or (
            self.second is not None and self.second.listens(job, attempt, instance))


class RoutingBootstrapper(Bootstrapper):
    """Per machine: started by its boot script (the store says when its job runs), or over SSH."""

    def __init__(self, reader: StoreReader, ssh: Bootstrapper | None = None, *, ssh_key: bool = False) -> None:
        self.store = StoreBootstrapper(reader)
        self.reader = reader
        self.ssh = ssh
        self.ssh_key = ssh_key

    def start(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        has_store = self.reader.has_store(job, attempt)
        if starts_by_boot(instance.provider, has_store, self.ssh_key):
            # A job with nowhere to report cannot say it runs: a running machine is taken as running it.
            return self.store.start(job, attempt, instance) if has_store else True
        return self.ssh.start(job, attempt, instance) if self.ssh is not None else False

    def stage(self, job: JobRecord, attempt: AttemptRecord, instance: Instance) -> bool:
        """Stage over SSH where this machine starts over SSH (see SshBootstrapper.stage); else nothing to do."""
        stage = getattr(self.ssh, "stage", None)
        if stage is None or starts_by_boot(instance.provider, self.reader.has_store(job, attempt), self.ssh_key):
            return False
        return bool(stage(job, attempt, instance))

    def ask_checkpoint(self, job: JobRecord, attempt: AttemptRecord, instance: Instance, reason: str) -> bool:
        """Over the store where the agent reports there (an SSH-started node is not asked: False)."""
        if self.reader.has_store(job, attempt) and starts_by_boot(instance.provider, True, self.ssh_key):
            return self.store.ask_checkpoint(job, attempt, instance, reason)
        return False
