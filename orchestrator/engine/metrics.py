"""The metrics step: keep the agents' GPU utilization readings in the store (the console's sparklines) and
publish what the clouds hold and how the jobs stand (Prometheus gauges)."""

from __future__ import annotations

import operator
from collections import Counter

from orchestrator.engine.config import EngineDeps
from orchestrator.engine.facts import TickFacts, same_listings
from orchestrator.engine.ports import JobRecord
from orchestrator.engine.values import GpuUtilSample
from providers.base import Instance, InstanceState


class MetricsStep:
    """Keeps the last tick's listings and jobs with what was counted from them: a steady tick (the same
    machines and job records, compared by identity at C speed) sets the same gauges without counting again."""

    def __init__(self) -> None:
        self._listed: dict[str, tuple[Instance, ...]] = {}
        self._machines: tuple[Counter[tuple[str, str]], float] = (Counter(), 0.0)
        self._jobs: list[JobRecord] = []
        self._statuses: Counter[str] = Counter()

    def run(self, deps: EngineDeps, facts: TickFacts) -> None:
        _record_gpu_util(deps, facts)
        metrics = deps.metrics
        if metrics is None:
            return
        if not same_listings(self._listed, facts.listed):
            self._listed, self._machines = dict(facts.listed), _count_machines(facts)
        counts, burn = self._machines
        metrics.instances.clear()
        for labels, n in counts.items():
            metrics.instances.labels(*labels).set(n)
        metrics.burn_usd_per_hour.set(burn)
        jobs = list(deps.store.active_jobs())
        if len(jobs) != len(self._jobs) or not all(map(operator.is_, jobs, self._jobs)):
            self._jobs, self._statuses = jobs, Counter(job.status.value for job in jobs)
        metrics.jobs.clear()
        for status, n in self._statuses.items():
            metrics.jobs.labels(status).set(n)


def _count_machines(facts: TickFacts) -> tuple[Counter[tuple[str, str]], float]:
    # Counted first, then one gauge write per label set: at 10k machines, a labels() lookup per machine
    # cost more than the rest of this step.
    counts: Counter[tuple[str, str]] = Counter()
    burn = 0.0
    for name, instances in facts.listed.items():
        for inst in instances:
            if not inst.state.is_gone and inst.state is not InstanceState.STOPPED:
                counts[(name, inst.market.value)] += 1
                burn += inst.price_hr or 0.0
    return counts, burn


def _record_gpu_util(deps: EngineDeps, facts: TickFacts) -> None:
    """One sample per attempt whose agent reported GPU readings this tick (one write for all of them)."""
    samples = [GpuUtilSample(seen.attempt.id, seen.attempt.job_id, facts.now, seen.agent.gpu_util_pct)
               for seen in facts.observed if seen.agent is not None and seen.agent.gpu_util_pct]
    if samples:
        deps.store.record_gpu_util(samples)
