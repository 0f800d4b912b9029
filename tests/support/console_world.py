"""A store filled as the engine would leave it after a few hours, for the console's tests and screenshots.

Written through the store's own functions (repo, gpu_util), the way ``orchestrator.store.sqlstore`` writes:

* ``llama-ft``: one node; generation 1 on AWS spot checkpoints twice and is preempted; generation 2 is the
  relaunch on GCP spot, running now, with a checkpoint since and GPU utilization samples for the last hour;
* ``bert-pretrain``: two nodes on Lambda on-demand, running, the cloud's actual price beside the quote;
* ``eval-sweep``: finished yesterday on RunPod, its spend one rolled-up row per attempt and day, near its budget;
* ``ablation-7``: applied, waiting for an offer, with a budget and no spend.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orchestrator.engine.events import EventKind
from orchestrator.engine.states import AttemptState, JobStatus
from orchestrator.engine.values import GpuUtilSample
from orchestrator.manifest.schema import Manifest
from orchestrator.store import repo
from orchestrator.store.db import Store
from orchestrator.store.gpu_util import record_gpu_util
from orchestrator.store.repo import AppliedJob, InstanceRecord
from providers.base import InstanceState, Market


@dataclass(frozen=True)
class ConsoleWorld:
    now: datetime
    running_job: str          # llama-ft: preempted once, relaunched, running
    relaunch_at: datetime     # when its relaunch (generation 2) was created
    preempted_at: datetime


def _manifest(name: str, gpu: str, *, market: str = "spot", budget: float | None = None, nodes: int = 1,
              count: int = 1) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "orch/v1", "kind": "Job", "name": name,
                           "resources": {"gpu": gpu, "count": count, "nodes": nodes}, "market": market,
                           "run": {"launcher": "command", "command": "python train.py"}}
    if budget is not None:
        doc["policies"] = {"budget_usd": budget}
    return Manifest.model_validate(doc).to_json()


def _attempt(tx: Any, job_id: int, launch_id: str, *, generation: int, provider: str, itype: str, region: str,
             zone: str | None, market: Market, price: float, gpu: str, created: datetime, node_rank: int = 0,
             actual: float | None = None, checkpoint: str | None = None) -> int:
    a = repo.create_attempt(tx, job_id, launch_id, generation=generation, node_rank=node_rank,
                            checkpoint_restored=checkpoint, now=created)
    repo.record_instance(tx, InstanceRecord(provider=provider, launch_id=launch_id, owner="demo", job_id=job_id,
                                            instance_type=itype, region=region, zone=zone, market=market,
                                            price_hr=price, gpu=gpu, gpu_count=1, state=InstanceState.PENDING,
                                            actual_price_hr=actual), now=created)
    assert a.id is not None
    return a.id


def _launched(tx: Any, attempt_id: int, launch_id: str, provider: str, instance_id: str, at: datetime,
              boot: timedelta = timedelta(minutes=3)) -> None:
    repo.transition_attempt(tx, attempt_id, AttemptState.LAUNCH_REQUESTED, now=at)
    repo.transition_attempt(tx, attempt_id, AttemptState.LAUNCHED, now=at)
    repo.record_instance(tx, InstanceRecord(provider=provider, launch_id=launch_id, owner="demo",
                                            instance_id=instance_id, state=InstanceState.RUNNING), now=at)
    repo.transition_attempt(tx, attempt_id, AttemptState.RUNNING, now=at + boot)


def _ticks(tx: Any, job_id: int, attempt_id: int, price: float, start: datetime, end: datetime,
           every: timedelta = timedelta(minutes=5)) -> None:
    """Spend rows as the engine writes them: one per tick interval."""
    t = start
    while t < end:
        nxt = min(t + every, end)
        repo.record_spend(tx, job_id, t, nxt, price * (nxt - t).total_seconds() / 3600, attempt_id=attempt_id)
        t = nxt


H = timedelta(hours=1)
M = timedelta(minutes=1)


def _job(tx: Any, name: str, manifest: dict[str, Any], source: str, applied: datetime) -> int:
    job, _ = repo.upsert_job(tx, AppliedJob(Manifest.model_validate(manifest), f"hash-{name}", source), now=applied)
    assert job.id is not None
    return job.id


def _llama(tx: Any, now: datetime) -> tuple[int, int, datetime, datetime]:
    """llama-ft: AWS spot with two checkpoints, preempted; relaunched on GCP spot, running. Returns (job id,
    the running attempt's id, when it was preempted, when the relaunch was created)."""
    job = _job(tx, "llama-ft", _manifest("llama-ft", "A100-80G", budget=60.0), "jobs/llama.yaml", now - 5 * H)
    g1_start, preempted_at = now - 5 * H, now - 3 * H
    a1 = _attempt(tx, job, "L-llama-1", generation=1, provider="aws", itype="p4de.24xlarge", region="us-east-1",
                  zone="us-east-1b", market=Market.SPOT, price=12.3, gpu="A100-80G", created=g1_start)
    repo.set_job_status(tx, job, JobStatus.LAUNCHING, now=g1_start)
    _launched(tx, a1, "L-llama-1", "aws", "i-0a1b2c3d4e5f60718", g1_start)
    repo.set_job_status(tx, job, JobStatus.RUNNING, now=g1_start + 3 * M)
    repo.record_event(tx, EventKind.STARTED, "job running on aws i-0a1b2c3d4e5f60718", job_id=job, ts=g1_start + 3 * M)
    for step, at in ((1000, g1_start + 50 * M), (2000, g1_start + 100 * M)):
        repo.record_checkpoint(tx, job, f"s3://ckpt/llama-ft/step-{step}", attempt_id=a1, step=step, committed_at=at)
    _ticks(tx, job, a1, 12.3, g1_start + 3 * M, preempted_at)
    repo.transition_attempt(tx, a1, AttemptState.PREEMPTED, reason="Server.SpotInstanceTermination", now=preempted_at)
    repo.mark_instance_gone(tx, "L-llama-1", InstanceState.PREEMPTED, "Server.SpotInstanceTermination",
                            now=preempted_at)
    repo.set_job_status(tx, job, JobStatus.RECOVERING, now=preempted_at)
    repo.record_event(tx, EventKind.PREEMPTED, "aws i-0a1b2c3d4e5f60718 preempted (Server.SpotInstanceTermination)",
                      job_id=job, ts=preempted_at)
    repo.record_event(tx, EventKind.RECOVERING, "relaunching from s3://ckpt/llama-ft/step-2000 on the cheapest offer",
                      job_id=job, ts=preempted_at)
    relaunch_at = preempted_at + M
    a2 = _attempt(tx, job, "L-llama-2", generation=2, provider="gcp", itype="a2-ultragpu-1g", region="us-central1",
                  zone="us-central1-a", market=Market.SPOT, price=2.05, gpu="A100-80G", created=relaunch_at,
                  checkpoint="s3://ckpt/llama-ft/step-2000")
    repo.count_relaunch(tx, job, now=relaunch_at)
    repo.set_job_status(tx, job, JobStatus.LAUNCHING, now=relaunch_at)
    _launched(tx, a2, "L-llama-2", "gcp", "orch-llama-ft-7f3a", relaunch_at, boot=4 * M)
    repo.set_job_status(tx, job, JobStatus.RUNNING, now=relaunch_at + 4 * M)
    repo.record_event(tx, EventKind.STARTED, "job running on gcp orch-llama-ft-7f3a", job_id=job,
                      ts=relaunch_at + 4 * M)
    repo.record_checkpoint(tx, job, "s3://ckpt/llama-ft/step-3000", attempt_id=a2, step=3000,
                           committed_at=relaunch_at + 70 * M)
    _ticks(tx, job, a2, 2.05, relaunch_at + 4 * M, now)
    return job, a2, preempted_at, relaunch_at


def _bert(tx: Any, now: datetime) -> tuple[int, list[int]]:
    """bert-pretrain: two nodes on Lambda on-demand, running, the cloud's actual price beside the quote."""
    start = now - 2 * H
    job = _job(tx, "bert-pretrain", _manifest("bert-pretrain", "H100-80G", market="on-demand", nodes=2),
               "jobs/bert.yaml", start)
    repo.set_job_status(tx, job, JobStatus.LAUNCHING, now=start)
    attempts = []
    for rank in (0, 1):
        lid = f"L-bert-{rank}"
        a = _attempt(tx, job, lid, generation=1, node_rank=rank, provider="lambda", itype="gpu_8x_h100_sxm5",
                     region="us-east-1", zone=None, market=Market.ON_DEMAND, price=23.92, gpu="H100-80G", created=start,
                     actual=23.92 if rank == 0 else 24.1)
        attempts.append(a)
        _launched(tx, a, lid, "lambda", f"0920582c7ff041399e34823a0be6254{rank}", start)
        _ticks(tx, job, a, 23.92, start + 3 * M, now, every=timedelta(minutes=10))
    repo.set_job_status(tx, job, JobStatus.RUNNING, now=start + 3 * M)
    return job, attempts


def _evals(tx: Any, now: datetime) -> None:
    """eval-sweep: finished yesterday on RunPod; its spend already rolled up (one row per attempt and day)."""
    start, end = now - 30 * H, now - 21 * H
    job = _job(tx, "eval-sweep", _manifest("eval-sweep", "L4-24G", budget=5.0), "jobs/eval.yaml", start)
    a = _attempt(tx, job, "L-eval-1", generation=1, provider="runpod", itype="NVIDIA L4", region="US", zone=None,
                 market=Market.SPOT, price=0.47, gpu="L4-24G", created=start)
    _launched(tx, a, "L-eval-1", "runpod", "k3l9x0v2", start)
    repo.transition_attempt(tx, a, AttemptState.SUCCEEDED, reason="job exited 0", now=end)
    repo.mark_instance_gone(tx, "L-eval-1", InstanceState.TERMINATED, now=end)
    repo.record_spend(tx, job, start, end, 4.23, attempt_id=a)
    repo.set_job_status(tx, job, JobStatus.SUCCEEDED, now=end)


def _util(tx: Any, now: datetime, llama: tuple[int, int], bert: tuple[int, list[int]]) -> None:
    """One reading per 15 s tick over the last hour for llama-ft (with a dip), the last half hour for bert."""
    samples = []
    for i in range(240):
        at = now - H + i * timedelta(seconds=15)
        dip = 40.0 if 100 <= i < 112 else 0.0
        samples.append(GpuUtilSample(llama[1], llama[0], at, (93.0 - dip + (i % 7), 88.0 - dip + (i % 5))))
        if i >= 120:
            for rank, a in enumerate(bert[1]):
                samples.append(GpuUtilSample(a, bert[0], at, tuple(70.0 + rank * 8 + (i * g) % 11 for g in range(8))))
    record_gpu_util(tx, samples)


def fill(store: Store, now: datetime) -> ConsoleWorld:
    with store.transaction() as tx:
        llama, running, preempted_at, relaunch_at = _llama(tx, now)
        bert = _bert(tx, now)
        _evals(tx, now)
        _job(tx, "ablation-7", _manifest("ablation-7", "H100-80G", budget=40.0), "jobs/ablation.yaml", now - 10 * M)
        _util(tx, now, (llama, running), bert)
    return ConsoleWorld(now=now, running_job="llama-ft", relaunch_at=relaunch_at, preempted_at=preempted_at)
