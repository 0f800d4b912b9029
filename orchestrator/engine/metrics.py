"""The metrics step: keep the agents' GPU utilization readings in the store (the console's sparklines) and
publish what the clouds hold and how the jobs stand (Prometheus gauges)."""

from __future__ import annotations

from collections import Counter

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.facts import TickFacts
from orchestrator.engine.values import GpuUtilSample
from providers.base import InstanceState


def run(deps: EngineDeps, facts: TickFacts) -> None:
    _record_gpu_util(deps, facts)
    metrics = deps.metrics
    if metrics is None:
        return
    # Counted first, then one gauge write per label set: at 10k machines, a labels() lookup per machine
    # cost more than the rest of this step.
    counts: Counter[tuple[str, str]] = Counter()
    burn = 0.0
    for name, instances in facts.listed.items():
        for inst in instances:
            if not inst.state.is_gone and inst.state is not InstanceState.STOPPED:
                counts[(name, inst.market.value)] += 1
                burn += inst.price_hr or 0.0
    metrics.instances.clear()
    for labels, n in counts.items():
        metrics.instances.labels(*labels).set(n)
    metrics.burn_usd_per_hour.set(burn)
    statuses = Counter(job.status.value for job in deps.store.active_jobs())
    metrics.jobs.clear()
    for status, n in statuses.items():
        metrics.jobs.labels(status).set(n)


def _record_gpu_util(deps: EngineDeps, facts: TickFacts) -> None:
    """One sample per attempt whose agent reported GPU readings this tick (one write for all of them)."""
    samples = [GpuUtilSample(seen.attempt.id, seen.attempt.job_id, facts.now, seen.agent.gpu_util_pct)
               for seen in facts.observed if seen.agent is not None and seen.agent.gpu_util_pct]
    if samples:
        deps.store.record_gpu_util(samples)
