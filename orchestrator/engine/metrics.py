"""The metrics step: publish what the clouds hold and how the jobs stand (Prometheus gauges)."""

from __future__ import annotations

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.facts import TickFacts
from providers.base import InstanceState


def run(deps: EngineDeps, facts: TickFacts) -> None:
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
