"""One kept-alive SSH transport per instance, shared by the bootstrapper and the monitor.

SSH-provider hosts use ``SshProvider.transport(id)`` (configured key, pinned host key); cloud instances get an
``SshTransport`` to ``public_ip:ssh_port`` as ``ssh_user`` with orch's key, pinned to the keys the provider's
API exposes (``Instance.host_keys``) or, where it exposes none, recorded on first contact. Also the two reads
both hooks make of an attempt on its machine: where its status file is, and the status itself.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Protocol, runtime_checkable

from orchestrator.engine.ports import AttemptRecord, JobRecord
from orchestrator.runtime.from_manifest import render_input_for
from orchestrator.runtime.node_facts import NodeSettings, launch_facts, node_settings_for
from orchestrator.runtime.render_input import RenderInput
from orchestrator.runtime.status import AgentStatus, StatusFormatError, parse_status
from providers.base import Instance, Provider
from providers.ssh.connection import SshTransport
from providers.ssh.errors import TransportError
from providers.ssh.hostkeys import HostKeyStore, HostTrust
from providers.ssh.transport import Transport

__all__ = ["TransportPool", "TransportSource", "read_status", "render_input", "status_path"]


def render_input(job: JobRecord, attempt: AttemptRecord, instance: Instance,
                  table: Mapping[str, NodeSettings]) -> RenderInput:
    """The attempt's RenderInput on this machine: the job's manifest plus the launch's and machine's facts."""
    node = node_settings_for(table, instance.provider, instance.instance_id)
    facts = launch_facts(job, attempt, node, table.get(attempt.master_key or ""), fabric=instance.fabric)
    return render_input_for(job.manifest, facts)


def status_path(ri: RenderInput) -> str:
    sp = ri.agent.status_path
    return sp if sp.startswith("/") else str(PurePosixPath(ri.resolved_work_dir) / sp)


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



def read_status(t: Transport, path: str) -> AgentStatus | None:
    try:
        return parse_status(t.get(path))
    except (TransportError, StatusFormatError):
        return None

