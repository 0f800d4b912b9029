#!/usr/bin/env python3
"""orch on-node agent. Python 3 standard library only: it must run on any image that has python3.

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

Usage: orch_agent.py --config agent.json [--once] [--no-job] [--await-go FILE]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total,power.draw",
                    "--format=csv,noheader,nounits"]
DEFAULT_METADATA = {"aws": "http://169.254.169.254", "gcp": "http://metadata.google.internal",
                    "azure": "http://169.254.169.254"}
STEP_DIR = re.compile(r"^step-(\d+)$")
STATUS_VERSION = 1
#: Written by orch in the report prefix: checkpoint now, then stop (orchestrator/runtime/node_state.py).
CHECKPOINT_NOW_OBJECT = "checkpoint-now.json"
MAX_ERRORS = 20
#: How often an agent started ahead of its go looks for the go file (a local stat): the go's latency.
GO_POLL_S = 0.02
#: The round's pause while a drain is due (a notice heard, its checkpoint not yet complete on disk): the
#: checkpoint is committed, and the replacement started, that much sooner after the job wrote it.
DRAIN_POLL_S = 0.05


def _number(field: str) -> float | None:
    field = field.strip()
    if not field or field.startswith("[") or field.upper() in ("N/A", "NA"):
        return None  # "[N/A]", "[Not Supported]", "[Unknown Error]"
    try:
        return float(field)
    except ValueError:
        return None


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """Parse nvidia-smi CSV (index, util %, mem used MiB, mem total MiB, power W); unknown fields -> None."""
    gpus = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5 or not fields[0].isdigit():
            continue
        util, used, total, power = (_number(f) for f in fields[1:])
        gpus.append({"index": int(fields[0]), "util": util, "mem_used_mib": used, "mem_total_mib": total,
                     "power_w": power})
    return gpus


class GpuSampler:
    """Keeps the last ``window`` samples. ``run`` is injectable: (argv, timeout) -> stdout text."""

    def __init__(self, window: int, run: Callable[[list[str], float], str] | None = None) -> None:
        self.samples: collections.deque[dict[str, Any]] = collections.deque(maxlen=window)
        self.available = True
        self.error: str | None = None
        self._run = run or self._run_nvidia_smi

    @staticmethod
    def _run_nvidia_smi(argv: list[str], timeout: float) -> str:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True)
        return out.stdout

    def sample(self, now: float) -> None:
        try:
            text = self._run(NVIDIA_SMI_QUERY, 10.0)
        except FileNotFoundError:
            self.available, self.error = False, "nvidia-smi not found"
            return
        except (subprocess.SubprocessError, OSError) as exc:
            self.error = f"nvidia-smi failed: {exc}"
            return
        self.available, self.error = True, None
        self.samples.append({"time": now, "gpus": parse_nvidia_smi(text)})

    def summary(self) -> dict[str, Any]:
        utils = [g["util"] for s in self.samples for g in s["gpus"] if g["util"] is not None]
        mems = [g["mem_used_mib"] for s in self.samples for g in s["gpus"] if g["mem_used_mib"] is not None]
        last = self.samples[-1] if self.samples else None
        last_utils = [g["util"] for g in last["gpus"] if g["util"] is not None] if last else []
        return {
            "samples": len(self.samples),
            "gpus": len(last["gpus"]) if last else 0,
            "window_s": (self.samples[-1]["time"] - self.samples[0]["time"]) if self.samples else 0.0,
            "mean_util": sum(utils) / len(utils) if utils else None,
            "max_util": max(utils) if utils else None,
            "last_mean_util": sum(last_utils) / len(last_utils) if last_utils else None,
            "max_mem_used_mib": max(mems) if mems else None,
        }


# --- preemption notices --------------------------------------------------------------------------

def _http(method: str, url: str, headers: dict[str, str], timeout: float) -> tuple[int, str]:
    # Imported here, not at the top: urllib.request (http.client, email) is a good part of the agent's own start,
    # which a start waits for, and an agent on a machine without notices never needs it.
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace") if exc.fp else ""


#: Notice kinds that ask for a checkpoint but never drain the job (orchestrator/runtime/status.py NoticeKind).
ADVISORY_KINDS = frozenset({"rebalance-recommendation", "maintenance-event"})


class NoticePoller:
    """Returns the notices the cloud shows now: a list of {cloud, kind, key, detail}. Errors are raised."""

    def __init__(self, cloud: str, base_urls: dict[str, str], timeout: float = 2.0) -> None:
        self.cloud = cloud
        self.base = (base_urls.get(cloud) or DEFAULT_METADATA.get(cloud, "")).rstrip("/")
        self.timeout = timeout

    def poll(self) -> list[dict[str, Any]]:
        if self.cloud == "aws":
            return self._aws()
        if self.cloud == "gcp":
            return self._gcp()
        if self.cloud == "azure":
            return self._azure()
        return []  # Vast, RunPod, Lambda, own machines: no notice to poll

    def _aws(self) -> list[dict[str, Any]]:
        code, token = _http("PUT", f"{self.base}/latest/api/token",
                            {"X-aws-ec2-metadata-token-ttl-seconds": "21600"}, self.timeout)
        if code != 200:
            raise OSError(f"IMDSv2 token: HTTP {code}")
        hdr = {"X-aws-ec2-metadata-token": token}
        found = []
        code, body = _http("GET", f"{self.base}/latest/meta-data/spot/instance-action", hdr, self.timeout)
        if code == 200:
            detail = json.loads(body)
            found.append({"cloud": "aws", "kind": "spot-interruption",
                          "key": f"aws:instance-action:{detail.get('action')}:{detail.get('time')}", "detail": detail})
        elif code != 404:
            raise OSError(f"spot/instance-action: HTTP {code}")
        code, body = _http("GET", f"{self.base}/latest/meta-data/events/recommendations/rebalance", hdr,
                           self.timeout)
        if code == 200:
            detail = json.loads(body)
            found.append({"cloud": "aws", "kind": "rebalance-recommendation",
                          "key": f"aws:rebalance:{detail.get('noticeTime')}", "detail": detail})
        elif code != 404:
            raise OSError(f"events/recommendations/rebalance: HTTP {code}")
        return found

    def _gcp(self) -> list[dict[str, Any]]:
        code, body = _http("GET", f"{self.base}/computeMetadata/v1/instance/preempted",
                           {"Metadata-Flavor": "Google"}, self.timeout)
        if code != 200:
            raise OSError(f"instance/preempted: HTTP {code}")
        found = []
        if body.strip().upper() == "TRUE":
            found.append({"cloud": "gcp", "kind": "preempted", "key": "gcp:preempted",
                          "detail": {"preempted": True}})
        # NONE, or MIGRATE_ON_HOST_MAINTENANCE / TERMINATE_ON_HOST_MAINTENANCE up to 60 min ahead on GPU VMs.
        code, body = _http("GET", f"{self.base}/computeMetadata/v1/instance/maintenance-event",
                           {"Metadata-Flavor": "Google"}, self.timeout)
        if code != 200:
            if found:      # never lose a preemption to a failed advisory poll
                return found
            raise OSError(f"instance/maintenance-event: HTTP {code}")
        event = body.strip()
        if event and event.upper() != "NONE":
            found.append({"cloud": "gcp", "kind": "maintenance-event", "key": f"gcp:maintenance:{event}",
                          "detail": {"maintenance-event": event}})
        return found

    def _azure(self) -> list[dict[str, Any]]:
        code, body = _http("GET", f"{self.base}/metadata/scheduledevents?api-version=2020-07-01",
                           {"Metadata": "true"}, self.timeout)
        if code != 200:
            raise OSError(f"scheduledevents: HTTP {code}")
        doc = json.loads(body)
        found = []
        for ev in doc.get("Events", []):
            if ev.get("EventType") in ("Preempt", "Terminate"):
                kind = "preempt" if ev.get("EventType") == "Preempt" else "terminate"
                found.append({"cloud": "azure", "kind": kind, "key": f"azure:{ev.get('EventId')}", "detail": ev})
        return found


# --- checkpoint store ----------------------------------------------------------------------------

#: rclone flags for an upload that overwrites whatever is there (a new step directory, LATEST).
FRESH_DEST = ("--no-traverse", "--no-check-dest")


class Store:
    """The durable store: rclone (``path`` is remote:path) or a local directory (plain copies)."""

    def __init__(self, spec: dict[str, Any], rclone: str = "rclone") -> None:
        self.kind = spec["kind"]
        self.path = spec["path"].rstrip("/")
        self.uri = spec.get("uri", self.path).rstrip("/")
        self.env = {**os.environ, **spec.get("env", {})}
        self.rclone = rclone

    def _rclone(self, *args: str, timeout: float = 3600.0) -> str:
        out = subprocess.run([self.rclone, *args], capture_output=True, text=True, env=self.env, timeout=timeout)
        if out.returncode != 0:
            raise OSError(f"rclone {args[0]} exited {out.returncode}: {out.stderr.strip()[-500:]}")
        return out.stdout

    def upload_dir(self, local: str, name: str, marker: str) -> None:
        """Upload ``local`` as ``name``; the marker goes last so a partial copy never looks complete."""
        dest = f"{self.path}/{name}"
        if self.kind == "local":
            tmp = f"{dest}.partial"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(local, tmp, ignore=shutil.ignore_patterns(marker))
            shutil.copy2(os.path.join(local, marker), os.path.join(tmp, marker))
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(tmp, dest)
            return
        # A new step directory: nothing there to compare with (--no-traverse: no listing first; --no-check-dest:
        # no lookup per file; a retry uploads again, which overwrites).
        self._rclone("copy", local, dest, "--exclude", f"/{marker}", *FRESH_DEST)
        self._rclone("copyto", os.path.join(local, marker), f"{dest}/{marker}", *FRESH_DEST)

    def upload_part(self, local: str, name: str, marker: str, node_rank: int) -> None:
        """One node's part of a multi-node checkpoint: its files, then ``<marker>.node-<rank>`` (its
        "my part is in" flag). The checkpoint's own marker is node 0's to write, once every part is in."""
        dest = f"{self.path}/{name}"
        flag = f"{marker}.node-{node_rank}"
        if self.kind == "local":
            os.makedirs(dest, exist_ok=True)
            for entry in os.listdir(local):
                if entry != marker:
                    src = os.path.join(local, entry)
                    if os.path.isdir(src):
                        shutil.copytree(src, os.path.join(dest, entry), dirs_exist_ok=True)
                    else:
                        shutil.copy2(src, os.path.join(dest, entry))
            _atomic_write(os.path.join(dest, flag), "ok\n")
            return
        self._rclone("copy", local, dest, "--exclude", f"/{marker}")
        self._rclone("copyto", os.path.join(local, marker), f"{dest}/{flag}")

    def has(self, name: str) -> bool:
        """Whether the object ``name`` (relative to the store's path) exists."""
        if self.kind == "local":
            return os.path.exists(f"{self.path}/{name}")
        parent, _, leaf = name.rpartition("/")
        try:
            listed = self._rclone("lsf", f"{self.path}/{parent}" if parent else self.path, "--files-only",
                                  timeout=120)
        except OSError:
            return False
        return leaf in listed.splitlines()

    def write_marker(self, name: str, marker: str) -> None:
        """Write the checkpoint's own marker (multi-node: after every node's part is in)."""
        if self.kind == "local":
            _atomic_write(f"{self.path}/{name}/{marker}", "complete\n")
            return
        with tempfile.NamedTemporaryFile("w", suffix=".marker", delete=False) as fh:
            fh.write("complete\n")
        try:
            self._rclone("copyto", fh.name, f"{self.path}/{name}/{marker}", timeout=300)
        finally:
            os.unlink(fh.name)

    def read_object(self, name: str) -> bytes | None:
        """The whole object ``name``, or None when it cannot be read."""
        if self.kind == "local":
            try:
                with open(f"{self.path}/{name}", "rb") as fh:
                    return fh.read()
            except OSError:
                return None
        out = subprocess.run([self.rclone, "cat", f"{self.path}/{name}"], capture_output=True, env=self.env,
                             timeout=120)
        return out.stdout if out.returncode == 0 else None

    def put_object(self, name: str, data: bytes) -> None:
        """Write the whole object ``name`` at once: a temp file renamed (local), one PUT (rclone rcat)."""
        if self.kind == "local":
            dest = f"{self.path}/{name}"
            directory = os.path.dirname(dest)
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, dest)
            return
        out = subprocess.run([self.rclone, "rcat", f"{self.path}/{name}"], input=data, capture_output=True,
                             env=self.env, timeout=300)
        if out.returncode != 0:
            raise OSError(f"rclone rcat exited {out.returncode}: {out.stderr.decode('utf-8', 'replace')[-500:]}")

    def read_latest(self) -> str | None:
        if self.kind == "local":
            try:
                with open(f"{self.path}/LATEST", encoding="utf-8") as fh:
                    return fh.read().strip() or None
            except FileNotFoundError:
                return None
        try:
            return self._rclone("cat", f"{self.path}/LATEST", timeout=120).strip() or None
        except OSError:
            return None

    def write_latest(self, name: str) -> None:
        if self.kind == "local":
            os.makedirs(self.path, exist_ok=True)
            _atomic_write(f"{self.path}/LATEST", name + "\n")
            return
        with tempfile.NamedTemporaryFile("w", suffix=".latest", delete=False) as fh:
            fh.write(name + "\n")
        try:
            self._rclone("copyto", fh.name, f"{self.path}/LATEST", *FRESH_DEST, timeout=300)
        finally:
            os.unlink(fh.name)


class _Unread:
    """Not read yet (``_move_latest`` reads LATEST itself)."""


_UNREAD = _Unread()


class _Background:
    """``fn()`` run on a thread of its own from now; ``result()`` waits for it (its exception re-raised)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _atomic_write(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _step_of(name: str) -> int:
    m = STEP_DIR.fullmatch(name)
    return int(m.group(1)) if m else -1


# --- outbound reporting -----------------------------------------------------------------------------

#: GPU samples kept in the reported copy of the status (the local file keeps the whole window).
REPORTED_SAMPLES = 12


class Reporter:
    """Writes the status and the job's output to the report store (``config["report"]``), outbound only.

    ``status.json``: the status document (as the local file, with the last few GPU samples), one whole
    object per write. ``logs/<NNNNNNNN>``: the job log cut at ``log_chunk_bytes``; chunk k holds bytes
    [k*C, (k+1)*C) and only the chunks that grew are put again (each whole).

    Uploads run on a background thread, so a slow store never delays the agent's own round (a notice, the
    drain, checkpoint uploads): ``submit`` hands over the newest status (serialized at once) and returns;
    a status superseded before its upload started is skipped. A failed upload is reported through
    ``on_error`` and retried with the next status. ``flush`` waits for what was submitted (the last report).
    """

    def __init__(self, spec: dict[str, Any], store: Store, clock: Callable[[], float],
                 on_error: Callable[[str, BaseException], None] = lambda where, exc: None) -> None:
        self.store = store
        self.clock = clock
        self.on_error = on_error
        self.interval = float(spec.get("interval_s", 10.0))
        self.chunk = max(1, int(spec.get("log_chunk_bytes", 1 << 20)))
        self.next_at = 0.0
        self.last_key: Any = None
        self.shipped = 0           # bytes of the job log already in the store
        self._cond = threading.Condition()
        self._pending: tuple[bytes, str] | None = None
        self._busy = False
        self._thread: threading.Thread | None = None

    def due(self, key: Any, force: bool) -> bool:
        return force or key != self.last_key or self.clock() >= self.next_at

    def submit(self, doc: dict[str, Any], key: Any, job_log: str) -> None:
        gpu = dict(doc["gpu"])
        gpu["samples"] = list(gpu["samples"])[-REPORTED_SAMPLES:]
        body = json.dumps({**doc, "gpu": gpu}, sort_keys=True).encode() + b"\n"
        self.last_key = key
        self.next_at = self.clock() + self.interval
        with self._cond:
            self._pending = (body, job_log)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="orch-report", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout_s: float = 120.0) -> bool:
        """Wait until everything submitted is uploaded (or failed); False after ``timeout_s``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout_s)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None)
                assert self._pending is not None
                (body, job_log), self._pending = self._pending, None
                self._busy = True
            try:
                self.upload(body, job_log)
            except (OSError, subprocess.SubprocessError) as exc:
                self.on_error("report", exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def upload(self, body: bytes, job_log: str) -> None:
        self.ship_log(job_log)
        self.store.put_object("status.json", body)

    def ship_log(self, path: str) -> None:
        try:
            size = os.path.getsize(path)
        except OSError:
            return
        if size <= self.shipped:
            return
        with open(path, "rb") as fh:
            for k in range(self.shipped // self.chunk, (size - 1) // self.chunk + 1):
                fh.seek(k * self.chunk)
                data = fh.read(min(self.chunk, size - k * self.chunk))
                self.store.put_object(f"logs/{k:08d}", data)
        self.shipped = size


# --- process tree ----------------------------------------------------------------------------------

def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants (from /proc), parents first.

    Needed because launchers do not keep their ranks in one process group: torchrun starts every worker
    in a new session, so a signal to the job's process group never reaches the training processes.
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the command name may contain spaces and ')'
        children.setdefault(ppid, []).append(int(entry))
    tree, queue = [], [root]
    while queue:
        pid = queue.pop(0)
        tree.append(pid)
        queue.extend(sorted(children.get(pid, [])))
    return tree


def signal_tree(root: int, sig: int) -> int:
    """Send ``sig`` to ``root`` and every descendant; returns how many were signalled."""
    sent = 0
    for pid in process_tree(root):
        try:
            os.kill(pid, sig)
            sent += 1
        except ProcessLookupError:
            pass
    return sent


# --- the agent -----------------------------------------------------------------------------------

class Agent:
    """One node's agent. ``tick()`` does one round; ``run()`` loops until the job has exited.

    Injectable for tests: ``clock`` (seconds), ``sampler`` (GpuSampler), ``poller`` (has ``poll()``),
    ``store`` (Store), ``sleep``.
    """

    def __init__(self, config: dict[str, Any], clock: Callable[[], float] = time.time,
                 sampler: GpuSampler | None = None, poller: Any = None, store: Store | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.clock = clock
        self.sleep = sleep
        self.sampler = sampler or GpuSampler(int(config.get("window", 120)))
        self.poller = poller or NoticePoller(config.get("cloud", "none"), config.get("metadata", {}))
        ckpt = config.get("checkpoint") or None
        self.ckpt = ckpt
        self.store = store or (Store(ckpt["store"], config.get("rclone", "rclone")) if ckpt else None)
        self.status_path = config.get("status_path", "status.json")
        self.sample_interval = float(config.get("sample_interval_s", 5.0))
        self.notice_interval = float(config.get("notice_interval_s", 1.0))
        self.next_sample = 0.0
        self.next_notice = 0.0
        self.credentials_interval = float(config.get("credentials_interval_s", 300.0))
        self.next_credentials = 0.0
        self.next_orch_poll = 0.0
        self.notices: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.checkpoints: list[dict[str, Any]] = []
        self.failed_uploads: dict[str, int] = {}
        self.errors: list[dict[str, Any]] = []
        self.latest: str | None = None
        self.node_rank = int(config.get("node_rank", 0))
        self.nodes = int(config.get("nodes", 1))
        self.parts: list[str] = []           # multi-node: checkpoints whose part this node has uploaded
        self.notice_baseline: set[str] | None = None   # checkpoints complete on disk when the notice came
        #: After a drain, the only checkpoints this node may still commit (those complete at the drain): the
        #: replacement may start once they are in, while this job still shuts down, so nothing later may
        #: move LATEST past what the replacement restored.
        self.sealed: set[str] | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.job: dict[str, Any] = {"state": "pending", "pid": None, "exit_code": None, "started_at": None,
                                    "ended_at": None}
        self.started_at = clock()
        self.awaiting_go = False
        report = config.get("report") or None
        self.reporter = (Reporter(report, Store(report, config.get("rclone", "rclone")), clock, self._error)
                         if report else None)
        self._restore_from_status()

    def _restore_from_status(self) -> None:
        # A restarted agent must not re-upload or forget what it already committed.
        try:
            with open(self.status_path, encoding="utf-8") as fh:
                old = json.load(fh)
        except (OSError, ValueError):
            return
        self.checkpoints = list(old.get("checkpoints", []))
        self.parts = list(old.get("parts", []))
        self.latest = old.get("latest")
        self.notices = list(old.get("notices", []))

    def _error(self, where: str, exc: BaseException | str) -> None:
        self.errors.append({"time": self.clock(), "where": where, "error": str(exc)})
        del self.errors[:-MAX_ERRORS]

    # job supervision
    def start_job(self, env: dict[str, str] | None = None) -> None:
        code = self.config.get("code")
        if code:
            try:
                unpack_code(code, ".")
            except (OSError, ValueError, tarfile.TarError) as exc:
                # The node's own words, where `orch events` shows them: the job never starts without its code.
                self.job.update(state="failed", ended_at=self.clock())
                self._error("code", exc)
                _append_log(self.config.get("job_log", "job.log"), f"orch: code pack: {exc}\n")
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

    # checkpoint-now
    def request_checkpoint(self, reason: str) -> None:
        if not self.ckpt:
            return
        notify = self.ckpt.get("notify", {})
        via = notify.get("via", "file")
        try:
            if via == "signal":
                if self.proc is None or self.job["state"] != "running":
                    raise OSError("no running job to signal")
                sig = getattr(signal, notify.get("signal", "SIGUSR1"))
                # Launchers ignore it (the startup script's trap); the training ranks handle it.
                signal_tree(self.proc.pid, sig)
            else:
                path = notify["file"]
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(reason + "\n")
        except (OSError, AttributeError, KeyError) as exc:
            self._error("checkpoint-now", exc)
            return
        self.requests.append({"time": self.clock(), "via": via, "reason": reason})

    def _poll_notices(self) -> None:
        try:
            current = self.poller.poll()
        except (OSError, ValueError) as exc:
            self._error("notice", exc)
            current = []
        current += self._orch_requests()
        seen = {n["key"] for n in self.notices}
        for notice in current:
            if notice["key"] in seen:
                continue
            # Only an interruption drains the job; an advisory (AWS rebalance, GCE maintenance) asks for a
            # checkpoint now and is reported, nothing more (orch's NoticeKind.ends_attempt says the same).
            if self.notice_baseline is None and notice["kind"] not in ADVISORY_KINDS:
                self.notice_baseline = set(self._complete_local())
            self.notices.append({**notice, "seen_at": self.clock()})
            self.request_checkpoint(f"{notice['cloud']} {notice['kind']}")

    def _orch_requests(self) -> list[dict[str, Any]]:
        """orch's own "checkpoint now, then stop" (``checkpoint-now.json`` in the report prefix, written when
        the job's budget is spent): an interrupting notice of kind ``orch-stop``, so the job checkpoints, is
        stopped once that checkpoint is complete, and the upload goes on (the drain)."""
        if (self.reporter is None or any(n["kind"] == "orch-stop" for n in self.notices)
                or self.clock() < self.next_orch_poll):
            return []
        # One look per report interval, not per notice poll: on a bucket each look is a LIST request.
        self.next_orch_poll = self.clock() + max(self.notice_interval, float(self.reporter.interval))
        try:
            if not self.reporter.store.has(CHECKPOINT_NOW_OBJECT):
                return []
            detail = json.loads(self.reporter.store.read_object(CHECKPOINT_NOW_OBJECT) or b"{}")
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            self._error("notice", exc)
            return []
        detail = detail if isinstance(detail, dict) else {}
        return [{"cloud": "orch", "kind": "orch-stop", "key": f"orch:checkpoint-now:{detail.get('at')}",
                 "detail": detail}]

    # checkpoints
    def _scan_checkpoints(self) -> None:
        if not self.ckpt or self.store is None:
            return
        root, marker = self.ckpt["dir"], self.ckpt.get("marker", "COMPLETE")
        committed = {c["name"] for c in self.checkpoints}
        todo = [n for n in self._committable() if n not in committed]
        if not todo:
            return
        # The store's LATEST, read while the first upload runs (not after it): one rclone start less on the
        # way from a checkpoint on disk to its commit. Single node: this agent is LATEST's only writer meanwhile.
        prefetch = _Background(self.store.read_latest) if self.nodes == 1 else None
        known: str | _Unread | None = _UNREAD
        for name in todo:
            if self.nodes > 1:
                if not self._commit_part(root, name, marker):
                    return
                if self.node_rank != 0:
                    continue
            else:
                try:
                    self.store.upload_dir(os.path.join(root, name), name, marker)
                except (OSError, shutil.Error, subprocess.SubprocessError) as exc:
                    self.failed_uploads[name] = self.failed_uploads.get(name, 0) + 1
                    self._error(f"upload {name}", exc)
                    return  # keep order: never commit a later checkpoint past a failed one
            self.failed_uploads.pop(name, None)
            self.checkpoints.append({"name": name, "step": _step_of(name), "uri": f"{self.store.uri}/{name}",
                                     "committed_at": self.clock()})
            if prefetch is None:
                self._move_latest(name)
                continue
            if isinstance(known, _Unread):
                known = prefetch.result()
            if self._move_latest(name, known):
                known = name        # what this agent just wrote is LATEST now

    def _commit_part(self, root: str, name: str, marker: str) -> bool:
        """Multi-node: upload this node's part once; on node 0, also wait (returning False, so the next
        round asks again) until every node's part is in, then write the checkpoint's marker. Only then may
        LATEST move: a checkpoint missing one node's files is never LATEST."""
        assert self.store is not None
        if name not in self.parts:
            try:
                self.store.upload_part(os.path.join(root, name), name, marker, self.node_rank)
            except (OSError, shutil.Error, subprocess.SubprocessError) as exc:
                self.failed_uploads[name] = self.failed_uploads.get(name, 0) + 1
                self._error(f"upload {name}", exc)
                return False
            self.parts.append(name)
            if self.node_rank != 0:
                self.failed_uploads.pop(name, None)
        if self.node_rank != 0:
            return True
        if not all(self.store.has(f"{name}/{marker}.node-{r}") for r in range(1, self.nodes)):
            return False
        try:
            self.store.write_marker(name, marker)
        except (OSError, subprocess.SubprocessError) as exc:
            self._error(f"marker {name}", exc)
            return False
        return True

    def _move_latest(self, name: str, current: str | _Unread | None = _UNREAD) -> bool:
        """Move the store's LATEST to ``name`` unless it is already there or further (``current``: LATEST as
        read before; read now when not given). True when it was written."""
        assert self.store is not None
        if isinstance(current, _Unread):
            current = self.store.read_latest()
        if current is not None and _step_of(current) >= _step_of(name):
            return False  # LATEST never moves backwards (another node or an earlier life got further)
        try:
            self.store.write_latest(name)
        except (OSError, subprocess.SubprocessError) as exc:
            self._error(f"latest {name}", exc)
            return False
        self.latest = name
        return True

    # status
    def status(self) -> dict[str, Any]:
        return {
            "version": STATUS_VERSION,
            "job_name": self.config.get("job_name"),
            "launch_id": os.environ.get("ORCH_LAUNCH_ID", ""),
            "node_rank": self.config.get("node_rank", 0),
            "agent": {"pid": os.getpid(), "started_at": self.started_at, "heartbeat": self.clock(),
                      "awaits_go": self.awaiting_go},
            "job": dict(self.job),
            "gpu": {"available": self.sampler.available, "error": self.sampler.error,
                    "samples": list(self.sampler.samples), "summary": self.sampler.summary()},
            "notices": self.notices,
            "checkpoint_requests": self.requests,
            "checkpoints": self.checkpoints,
            "parts": self.parts,
            "pending_uploads": self._pending_uploads(),
            "latest": self.latest,
            "failed_uploads": dict(self.failed_uploads),
            "errors": self.errors,
        }

    def write_status(self) -> None:
        _atomic_write(self.status_path, json.dumps(self.status(), sort_keys=True) + "\n")

    def tick(self) -> None:
        now = self.clock()
        if now >= self.next_sample:
            self.sampler.sample(now)
            self.next_sample = now + self.sample_interval
        if now >= self.next_notice:
            self._poll_notices()
            self.next_notice = now + self.notice_interval
        if self.reporter is not None and now >= self.next_credentials:
            self.refresh_credentials()
            self.next_credentials = now + self.credentials_interval
        self._poll_job()
        self._drain_after_notice()
        self._scan_checkpoints()
        self.write_status()
        self.report()

    def refresh_credentials(self) -> None:
        """Switch to the store credential orch renewed in ``credentials.json`` (if any): this process's
        environment and every store's, so later rclone runs use it. Values are never written to disk or logged."""
        assert self.reporter is not None
        try:
            doc = json.loads(self.reporter.store.read_object("credentials.json") or b"{}")
        except (OSError, ValueError) as exc:
            self._error("credentials", exc)
            return
        env = doc.get("env") if isinstance(doc, dict) else None
        if not isinstance(env, dict) or not env:
            return
        fresh = {str(k): str(v) for k, v in env.items()}
        os.environ.update(fresh)
        for store in (self.store, self.reporter.store):
            if store is not None:
                store.env.update(fresh)

    def report(self, force: bool = False) -> None:
        """Send the status (and new job output) to the report store when something the daemon acts on
        changed, or every ``interval_s`` as a heartbeat."""
        if self.reporter is None:
            return
        key = (self.job["state"], self.job.get("drained", False), len(self.notices), self.latest,
               self._pending_uploads(), len(self.checkpoints))
        if self.reporter.due(key, force):
            self.reporter.submit(self.status(), key, self.config.get("job_log", "job.log"))

    def final_report(self) -> None:
        """The last word before the agent exits: the final status and output, uploaded before it returns."""
        if self.reporter is not None:
            self.report(force=True)
            self.reporter.flush()

    def _complete_local(self) -> list[str]:
        """Names of the checkpoints complete on this node's disk (their marker written), by step."""
        if not self.ckpt:
            return []
        root, marker = self.ckpt["dir"], self.ckpt.get("marker", "COMPLETE")
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            return []
        return sorted((n for n in names if STEP_DIR.fullmatch(n) and os.path.isfile(os.path.join(root, n, marker))),
                      key=_step_of)

    def _committable(self) -> list[str]:
        """The complete local checkpoints this node may still commit: all of them, or after a drain only
        those complete at the drain (``sealed``)."""
        names = self._complete_local()
        return names if self.sealed is None else [n for n in names if n in self.sealed]

    def _pending_uploads(self) -> int:
        done = set(self.parts) if self.nodes > 1 and self.node_rank != 0 else {c["name"] for c in self.checkpoints}
        return sum(1 for n in self._committable() if n not in done)

    def _drain_after_notice(self) -> None:
        """After a preemption notice, as soon as a checkpoint taken since is complete on disk, stop the
        job (the upload goes on): the machine is going away, steps trained past that checkpoint would be
        lost, and this machine writing checkpoints beside its replacement would interleave lineages.
        Single-node only: on several nodes stopping one node's ranks makes the others fail before node 0
        commits, so the notice window ends them instead. ``drain_after_notice: false`` opts out."""
        if not self._drain_due() or self.notice_baseline is None:
            return
        if set(self._complete_local()) - self.notice_baseline:
            self.sealed = set(self._complete_local())
            self.job["drained"] = True
            self.job["drained_at"] = self.clock()
            self.stop_job(signal.SIGTERM)

    def _drain_due(self) -> bool:
        """A notice was heard and the job runs on, not yet drained (single node, draining on)."""
        return not (self.nodes > 1 or self.notice_baseline is None or not self.ckpt
                    or self.job["state"] != "running" or self.job.get("drained")
                    or not self.config.get("drain_after_notice", True))

    def stop_job(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.job["state"] == "running":
            signal_tree(self.proc.pid, sig)

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
        _atomic_write(f"{go_file}.wait", f"{os.getpid()}\n")
        next_beat = 0.0
        while not os.path.exists(go_file):
            now = self.clock()
            if now >= next_beat:
                self.write_status()
                next_beat = now + self.round_pause()
            self.sleep(GO_POLL_S)
        self.awaiting_go = False

    def round_pause(self) -> float:
        """The pause between rounds: the shortest interval (at most 1 s), ``DRAIN_POLL_S`` while a drain is
        due (see ``_drain_after_notice``)."""
        pause = min(self.sample_interval, self.notice_interval, 1.0)
        return min(pause, DRAIN_POLL_S) if self._drain_due() else pause

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


def unpack_code(spec: dict[str, Any], dest: str) -> None:
    """Unpack the job's code pack (``spec["file"]``, put beside the agent by the launch) into ``dest``, once:
    its sha256 must be the applied one, no member may leave ``dest``; a marker names the unpacked pack."""
    marker = os.path.join(dest, ".orch-code")
    try:
        with open(marker, encoding="utf-8") as fh:
            if fh.read().strip() == spec["sha256"]:
                return                      # a restarted agent: already unpacked
    except OSError:
        pass
    path = os.path.join(dest, spec["file"])
    if not os.path.exists(path) and spec.get("store"):
        # Booted by its user data: the pack is in the job's store (put there by orch before the go).
        fetched = Store(spec["store"]).read_object(spec["object"])
        if fetched is None:
            raise OSError(f"{spec['object']} is not in {spec['store'].get('uri')}")
        with open(path, "wb") as fh:
            fh.write(fetched)
    with open(path, "rb") as fh:
        data = fh.read()
    if hashlib.sha256(data).hexdigest() != spec["sha256"]:
        raise ValueError(f"{spec['file']} does not match its sha256 (a partial or altered copy)")
    root = os.path.realpath(dest)
    with tarfile.open(path, "r:gz") as tar:
        members = tar.getmembers()
        for m in members:
            target = os.path.realpath(os.path.join(root, m.name))
            if m.name.startswith("/") or (target != root and not target.startswith(root + os.sep)):
                raise ValueError(f"{spec['file']}: member {m.name!r} would land outside the work dir")
            if not (m.isfile() or m.isdir() or m.issym()):
                raise ValueError(f"{spec['file']}: member {m.name!r} is not a file, directory or link")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, members=members, filter="data")
        else:
            tar.extractall(root, members=members)
    _atomic_write(marker, spec["sha256"] + "\n")


def _append_log(path: str, line: str) -> None:
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="orch on-node agent")
    parser.add_argument("--config", required=True, help="agent JSON config (rendered by orch)")
    parser.add_argument("--once", action="store_true", help="one tick, then exit (tests, debugging)")
    parser.add_argument("--no-job", action="store_true", help="do not start the job")
    parser.add_argument("--await-go", metavar="FILE", help="start the job only once FILE exists (then removed)")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as fh:
        agent = Agent(json.load(fh))
    if args.once:
        if not args.no_job:
            agent.start_job()
        agent.tick()
        if agent.reporter is not None:
            agent.reporter.flush()      # the upload thread is a daemon: let this round's report land first
        return 0
    if args.no_job:
        while True:
            agent.tick()
            agent.sleep(min(agent.sample_interval, agent.notice_interval))

    def _on_term(signum: int, _frame: Any) -> None:
        # The instance is going away: pass it on to the job (it may checkpoint), then record and leave.
        agent.stop_job(signum)
        agent.tick()
        agent.final_report()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, _on_term)
    return agent.run(args.await_go)


if __name__ == "__main__":
    sys.exit(main())
