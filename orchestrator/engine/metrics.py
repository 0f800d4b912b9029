"""The metrics step: keep the agents' GPU utilization readings in the store (the console's sparklines) and
publish what the clouds hold and how the jobs stand (Prometheus gauges)."""

from __future__ import annotations

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.facts import TickFacts
from orchestrator.store.gpu_util import GpuUtilSample
from providers.base import InstanceState


def run(deps: EngineDeps, facts: TickFacts) -> None:
    _record_gpu_util(deps, facts)
    metrics = deps.metrics
    if metrics is None:
        return
    metrics.instances.clear()
    burn = 0.0
    for name, instances in facts.listed.items():
        for inst in instances:
            if not inst.state.is_gone and inst.state is not InstanceState.STOPPED:
                metrics.instances.labels(name, inst.market.value).inc()
                burn += inst.price_hr or 0.0
    metrics.burn_usd_per_hour.set(burn)
    metrics.jobs.clear()
    for job in deps.store.active_jobs():
        metrics.jobs.labels(job.status.value).inc()


def _record_gpu_util(deps: EngineDeps, facts: TickFacts) -> None:
    """One sample per attempt whose agent reported GPU readings this tick (one write for all of them)."""
    samples = [GpuUtilSample(seen.attempt.id, seen.attempt.job_id, facts.now, seen.agent.gpu_util_pct)
               for seen in facts.observed if seen.agent is not None and seen.agent.gpu_util_pct]
    if samples:
        deps.store.record_gpu_util(samples)
