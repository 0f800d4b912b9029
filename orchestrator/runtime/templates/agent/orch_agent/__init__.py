"""orch on-node agent. Python 3 standard library only: it must run on any image that has python3 (3.7 or newer:
the modules import ``annotations`` from __future__). Orch ships it as one zipapp, ``orch_agent.pyz``, built from this
package (orchestrator/runtime/agent_app.py).

What it does every tick (see docs/runtime.md for the formats):
  * samples nvidia-smi into a rolling window (a missing nvidia-smi or "[N/A]" fields are not errors);
  * polls the cloud's preemption notice (AWS IMDSv2, GCP metadata, Azure Scheduled Events) and, on a
    new notice, asks the job to checkpoint now (signal to its process group, or a request file);
  * uploads every completed checkpoint (<dir>/step-<N>/ holding the COMPLETE marker) to the durable
    store, and only after the upload succeeded moves the store's LATEST pointer to it (never backwards);
    multi-node: each node uploads its part and a COMPLETE.node-<rank> flag, and node 0 writes the
    checkpoint's COMPLETE and moves LATEST only once every node's flag is in the store;
  * after a notice, once a checkpoint taken since is complete on disk, stops the job and goes on
    uploading it (drain; single node); from then on it commits only the checkpoints complete at the drain
    (a checkpoint the stopping job writes later never moves LATEST: the replacement may already have
    restored); the status says how many of those still await upload;
  * started ahead of its go (``--await-go FILE``: a replacement whose predecessor still drains), it unpacks
    the code, reports itself (job pending, ``awaits_go``) and starts the job the moment orch creates FILE
    (looked for every ``GO_POLL_S``), then removes FILE: its Python start is off the relaunch's path;
  * supervises the job (its own process group), recording pid and exit code; booted by its user data
    (``report.wait_for_start``), it starts the job only once orch has put ``start.json`` in its report prefix,
    with the job's secrets from ``secrets.json`` there (``report.secrets``; held in memory only);
  * every ``credentials_interval_s``, reads ``credentials.json`` from its report prefix (orch renews the node's
    short-lived store credential there before it expires) and switches its stores and later rclone runs to it;
  * writes its whole state to the status file atomically (temp file + os.replace);
  * reports outbound only (no inbound port): the same status document, as one whole object, to
    ``<report store>/status.json`` every ``interval_s`` and at once on a notice, a job state change or a
    new committed checkpoint, and ships the job's output (job.log) as ``logs/<chunk>`` objects of at most
    ``log_chunk_bytes`` each (the last one re-put whole as it grows), so logs outlive the machine.

Usage: python3 orch_agent.pyz --config agent.json [--once] [--no-job] [--await-go FILE]

Modules, one job each: ``gpu`` (nvidia-smi samples), ``notices`` (the cloud's preemption notices), ``store``
(the durable store), ``reporting`` (the outbound report), ``proctree`` (signals to the job's process tree),
``codepack`` (the job's code), ``files`` (whole-file writes); the agent itself is built up in layers, each a
class on the ones before it: ``base`` (config and state), ``job`` (the job's process), ``commits``
(checkpoint uploads and LATEST), ``interrupts`` (notices, checkpoint-now and the drain), ``rounds`` (one
round, the status and the report), ``agent`` (waiting for orch's go, the run loop); ``cli`` parses the command
line, and ``__main__`` (the zipapp's entry) runs it. This file names what the package offers (for tests).
"""

from __future__ import annotations

from .agent import GO_POLL_S, Agent
from .codepack import unpack_code
from .gpu import GpuSampler, parse_nvidia_smi
from .notices import NoticePoller
from .proctree import process_tree, signal_tree
from .reporting import Reporter
from .rounds import DRAIN_POLL_S
from .store import Store

__all__ = ["DRAIN_POLL_S", "GO_POLL_S", "Agent", "GpuSampler", "NoticePoller", "Reporter", "Store",
           "parse_nvidia_smi", "process_tree", "signal_tree", "unpack_code"]
