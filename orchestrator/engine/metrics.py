"""The metrics step: publish what the clouds hold and how the jobs stand (Prometheus gauges)."""

from __future__ import annotations

from collections import Counter

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.facts import TickFacts
from providers.base import InstanceState


def run(deps: EngineDeps, facts: TickFacts) -> None:
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
