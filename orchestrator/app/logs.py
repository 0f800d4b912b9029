"""``orch logs``: a job's output, from the report store its agent ships it to (so it outlives the machine),
or over SSH from the machine where there is no store and the machine is reachable.

The agent cuts the job's output (job.log: stdout and stderr) into ``<launch prefix>/logs/<k>`` objects of
``LOG_CHUNK_BYTES`` (orchestrator/runtime/node_state.py); chunk k holds bytes [k*C, (k+1)*C). Reading
concatenates them; following re-reads the chunk being written and the ones after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from orchestrator.app.errors import no_job_named
from orchestrator.runtime.node_state import LOG_CHUNK_BYTES, LOGS_DIR, launch_state_uri
from orchestrator.words import plural

if TYPE_CHECKING:
    from orchestrator.manifest.schema import Manifest
    from orchestrator.runtime.objectstore import StoreClient
    from orchestrator.store.db import Store

__all__ = ["LogSource", "LogsError", "Via", "follow_log", "log_source", "read_log"]


class LogsError(LookupError):
    """No such job or node, or nothing to read its output from; the message says which and what to do."""


class Via(StrEnum):
    STORE = "store"
    SSH = "ssh"


@dataclass(frozen=True, slots=True)
class LogSource:
    """Where one node's output of a job's latest attempt is: its report prefix (``uri``) or, without one,
    its machine over SSH (``provider``/``instance_id``, the job's work dir)."""

    job: str
    node_rank: int
    launch_id: str
    attempt_live: bool
    via: Via
    uri: str = ""
    provider: str = ""
    instance_id: str = ""


def log_source(store: Store, job_name: str, node_rank: int = 0, state_store: str = "") -> LogSource:
    """The latest attempt of ``job_name``'s node ``node_rank``, and where its output can be read."""
    from orchestrator.engine.states import AttemptState
    from orchestrator.manifest.schema import Manifest
    from orchestrator.store import command_queries, repo

    with store.transaction() as tx:
        job = repo.get_job(tx, job_name)
        if job is None:
            raise LogsError(no_job_named([job_name], command_queries.job_names(tx).values()))
        manifest: Manifest = Manifest.model_validate(job.manifest)
        nodes = manifest.resources.nodes
        if node_rank >= nodes:   # not "no node 1 yet": a job of one node never has one
            raise LogsError(f"job {job_name!r} runs on {plural(nodes, 'node')}: --node 0"
                            + (f" to {nodes - 1}" if nodes > 1 else ""))
        attempts = [a for a in repo.list_attempts(tx, job.id or 0) if a.node_rank == node_rank]
        if not attempts:
            raise LogsError(f"job {job_name!r} has no node {node_rank} yet: nothing was launched for it")
        attempt = max(attempts, key=lambda a: (a.generation, a.id or 0))
        inst = repo.get_instance_by_launch_id(tx, attempt.launch_id)
    live = AttemptState(attempt.state).is_live
    uri = launch_state_uri(manifest, attempt.launch_id, state_store)
    if uri is not None:
        return LogSource(job_name, node_rank, attempt.launch_id, live, Via.STORE, uri=uri)
    # The launch's instance row is written before the launch call: without an instance id no machine came.
    if (inst is None or not inst.instance_id) and not live:
        # Its latest launch ended before the cloud gave it a machine (refused, failed): there never was output.
        why = f": {attempt.reason}" if attempt.reason else ""
        raise LogsError(f"job {job_name!r} has no output: its latest launch ended without a machine "
                        f"({attempt.state}{why}); `orch events {job_name}` says why")
    if inst is None or not inst.instance_id:
        raise LogsError(f"job {job_name!r} has no output yet: its machine is still being launched")
    if not live:
        raise LogsError(f"job {job_name!r} keeps no logs: it has no checkpoint store and daemon.state_store is "
                        "not set, and its machine is gone")
    return LogSource(job_name, node_rank, attempt.launch_id, live, Via.SSH, provider=inst.provider,
                     instance_id=inst.instance_id or "")


def store_client(source: LogSource, endpoint: str = "", environ: Mapping[str, str] | None = None) -> StoreClient:
    from orchestrator.runtime.objectstore import StoreClient, parse_store

    return StoreClient(parse_store(source.uri, endpoint), environ=dict(environ) if environ is not None else None)


def read_log(client: StoreClient, start: int = 0) -> bytes:
    """The job's output shipped so far, from byte ``start`` on (b"" when there is none yet)."""
    chunks = sorted(n for n in client.list(LOGS_DIR) if n.isdigit())
    out = []
    for name in chunks:
        k = int(name)
        if (k + 1) * LOG_CHUNK_BYTES <= start:
            continue
        data = client.get(f"{LOGS_DIR}/{name}") or b""
        out.append(data[max(0, start - k * LOG_CHUNK_BYTES):])
    return b"".join(out)


def follow_log(read: Callable[[int], bytes], still_running: Callable[[], bool], *, start: int = 0,
               poll_s: float = 2.0, max_wait_s: float | None = None,
               sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic
               ) -> Iterator[bytes]:
    """New output as it arrives, from byte ``start``; ends once the attempt has ended and a last read found
    nothing new, or after ``max_wait_s`` without new output."""
    offset, quiet_since = start, clock()
    while True:
        running = still_running()
        data = read(offset)
        if data:
            offset += len(data)
            quiet_since = clock()
            yield data
        elif not running:
            return
        if max_wait_s is not None and clock() - quiet_since >= max_wait_s:
            return
        sleep(poll_s)
