"""Where a node's agent reports, outbound only: the layout of the report store (docs/runtime.md).

Every launch (one machine of one attempt) reports under its own prefix, so a replacement never reads
its predecessor's status and the logs of every machine a job ran on stay apart::

    <job state>/<launch id>/status.json      the agent's status document (heartbeat, job, GPU, notices,
                                              checkpoints, LATEST), one whole object, rewritten each report
    <job state>/<launch id>/logs/00000000    the job's output, in chunks of ``LOG_CHUNK_BYTES``
    <job state>/<launch id>/start.json       written by orch: "start the job now" (a node booted by its
                                              user data waits for it, so orch still decides when a job starts)
    <job state>/<launch id>/checkpoint-now.json   written by orch: "checkpoint now, then stop" (a job's budget
                                              spent); the agent takes it as an interrupting notice (kind
                                              ``orch-stop``): it asks the job to checkpoint, stops it once a
                                              new checkpoint is complete, and uploads it

``<job state>`` is ``<checkpoint store>/_orch`` for a job with a checkpoint store, else
``<state_store>/<job name>`` (the daemon-wide ``daemon.state_store``), else there is none (the job is
reachable over SSH only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.manifest.schema import Manifest

__all__ = ["CHECKPOINT_NOW_OBJECT", "LOGS_DIR", "LOG_CHUNK_BYTES", "START_OBJECT", "STATE_DIR", "STATUS_OBJECT",
           "job_state_uri", "launch_state_uri"]

STATE_DIR = "_orch"
STATUS_OBJECT = "status.json"
START_OBJECT = "start.json"
CHECKPOINT_NOW_OBJECT = "checkpoint-now.json"
LOGS_DIR = "logs"
LOG_CHUNK_BYTES = 1 << 20


def job_state_uri(manifest: Manifest, state_store: str = "") -> str | None:
    """The job's report prefix, or None when the job has neither a checkpoint store nor a state store."""
    if manifest.checkpoint is not None and manifest.checkpoint.store:
        return f"{manifest.checkpoint.store.rstrip('/')}/{STATE_DIR}"
    if state_store:
        return f"{state_store.rstrip('/')}/{manifest.name}"
    return None


#: What ``orch plan``/``apply`` say of a job whose agent has nowhere to report (orchestrator/engine/liveness.py).
BLIND = ("blind: no report channel (no checkpoint store, no daemon.state_store, no SSH key): orch watches only "
         "the cloud's state: no idle detection, no preemption notices, no heartbeat deadline")


def blind_note(manifest: Manifest, *, state_store: str = "", ssh_key: bool = False) -> str | None:
    """``BLIND`` for a cloud job whose agent cannot report to orch (no store, no SSH key); None otherwise."""
    return None if ssh_key or job_state_uri(manifest, state_store) is not None else BLIND


def launch_state_uri(manifest: Manifest, launch_id: str, state_store: str = "") -> str | None:
    """One launch's report prefix (None: no store to report to)."""
    job = job_state_uri(manifest, state_store)
    return None if job is None or not launch_id else f"{job}/{launch_id}"
