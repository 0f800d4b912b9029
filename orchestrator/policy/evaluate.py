"""Many jobs over many traces: every policy on every zone set from many start times, plus the optimum.

Used by ``orch simulate`` and tests/bench/bench_simulate.py. Work is split per zone set across processes
(``workers``); results come back as values and are summarized here.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.registry import load_policy_file, make_policy
from orchestrator.policy.simulator import SimResult, simulate, window_ticks
from orchestrator.policy.traces import ZoneSet

OPTIMUM = "optimum"


def start_ticks(zones: ZoneSet, spec: ProblemSpec, count: int) -> list[int]:
    """``count`` start ticks spread evenly over the trace, each leaving a whole deadline window after it.

    A trace shorter than one window gives the single start 0 (its end then has no spot).
    """
    span = zones.ticks - window_ticks(spec, zones.gap_h)
    if span <= 0 or count <= 1:
        return [0]
    return sorted({round(i * span / (count - 1)) for i in range(count)})


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One zone set: per policy, one SimResult per start; the optimum's normalized cost per start."""

    zone_set: str
    zones: int
    starts: tuple[int, ...]
    runs: tuple[tuple[str, tuple[SimResult, ...]], ...]
    optimum: tuple[float | None, ...] | None

    def results(self, policy: str) -> tuple[SimResult, ...]:
        for name, rs in self.runs:
            if name == policy:
                return rs
        raise KeyError(policy)


def run_case(spec: ProblemSpec, zones: ZoneSet, policies: Sequence[str], starts: Sequence[int],
             notice: bool = False, with_optimum: bool = True, policy_files: Sequence[str] = (),
             optimum_cache: str | None = None) -> CaseResult:
    """Every policy on one zone set from each start. ``policy_files`` are loaded first (in this process: a
    worker process loads them again, so a user's policy runs in every worker). ``optimum_cache``: a directory
    where the optimum's values are kept by the traces' contents (optimum_cache.py); None: always solved."""
    for path in policy_files:
        load_policy_file(Path(path))
    runs = tuple(
        (name, tuple(simulate(spec, zones, make_policy(name), s, notice=notice) for s in starts))
        for name in policies
    )
    opt: tuple[float | None, ...] | None = None
    if with_optimum:
        opt = _optimum_values(spec, zones, starts, optimum_cache)
    return CaseResult(zones.name, len(zones.zones), tuple(starts), runs, opt)


def _optimum_values(spec: ProblemSpec, zones: ZoneSet, starts: Sequence[int],
                    cache: str | None) -> tuple[float | None, ...]:
    from orchestrator.policy import optimum_cache
    from orchestrator.policy.optimum import DEFAULT_MAX_LEVELS, optimum

    entry = optimum_cache.key(spec, zones, starts, DEFAULT_MAX_LEVELS) if cache is not None else ""
    if cache is not None:
        kept = optimum_cache.load(Path(cache), entry, len(starts))
        if kept is not None:
            return tuple(kept)
    values = tuple(r.normalized_cost for r in optimum(spec, zones, starts, DEFAULT_MAX_LEVELS))
    if cache is not None:
        optimum_cache.store(Path(cache), entry, values)
    return values


def _run_case_args(args: tuple[ProblemSpec, ZoneSet, tuple[str, ...], tuple[int, ...], bool, bool,
                                tuple[str, ...], str | None]) -> CaseResult:
    return run_case(*args)


def evaluate(spec: ProblemSpec, sets: Sequence[ZoneSet], policies: Sequence[str], n_starts: int,
             notice: bool = False, with_optimum: bool = True, workers: int | None = None,
             policy_files: Sequence[str] = (), optimum_cache: str | None = None) -> list[CaseResult]:
    """Every policy (and the optimum) on every zone set from ``n_starts`` start times; in set order.
    ``optimum_cache``: see ``run_case``."""
    jobs = [(spec, zs, tuple(policies), tuple(start_ticks(zs, spec, n_starts)), notice, with_optimum,
             tuple(policy_files), optimum_cache) for zs in sets]
    workers = workers if workers is not None else min(len(jobs), os.cpu_count() or 1)
    if workers <= 1 or len(jobs) <= 1:
        return [_run_case_args(j) for j in jobs]
    # Big sets first, so one long case does not finish last alone.
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i][1].ticks * len(jobs[i][1].zones) / jobs[i][1].gap_h)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = dict(zip(order, pool.map(_run_case_args, [jobs[i] for i in order]), strict=True))
    return [done[i] for i in range(len(jobs))]


#: The ADRS score's weight on the spread: score = mean + SCORE_STD_WEIGHT x standard deviation (of the
#: normalized costs over the runs), as the ADRS study of spot policies ranks them.
SCORE_STD_WEIGHT = 0.25


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """One policy over many runs: normalized cost (mean, worst, spread, ADRS score), deadlines met, finish,
    preemptions, switches."""

    policy: str
    runs: int
    mean_cost: float
    worst_cost: float
    met_pct: float
    mean_finish_h: float | None
    mean_preemptions: float
    mean_switches: float
    std_cost: float = 0.0

    @property
    def score(self) -> float:
        """mean + 0.25 x std: the ADRS score (lower is better)."""
        return self.mean_cost + SCORE_STD_WEIGHT * self.std_cost


def summarize(policy: str, results: Sequence[SimResult]) -> PolicySummary:
    costs = [r.normalized_cost for r in results]
    finishes = [r.finish_h for r in results if r.finish_h is not None]
    return PolicySummary(
        policy=policy, runs=len(results), mean_cost=statistics.fmean(costs), worst_cost=max(costs),
        met_pct=100.0 * sum(r.met for r in results) / len(results),
        mean_finish_h=statistics.fmean(finishes) if finishes else None,
        mean_preemptions=statistics.fmean(r.preemptions for r in results),
        mean_switches=statistics.fmean(r.switches for r in results),
        std_cost=statistics.pstdev(costs),
    )


def summarize_optimum(cases: Sequence[CaseResult]) -> PolicySummary | None:
    values = [v for c in cases if c.optimum is not None for v in c.optimum]
    if not values:
        return None
    feasible = [v for v in values if v is not None]
    return PolicySummary(
        policy=OPTIMUM, runs=len(values), mean_cost=statistics.fmean(feasible) if feasible else float("nan"),
        worst_cost=max(feasible) if feasible else float("nan"),
        met_pct=100.0 * len(feasible) / len(values), mean_finish_h=None, mean_preemptions=0.0, mean_switches=0.0,
        std_cost=statistics.pstdev(feasible) if feasible else 0.0,
    )


def scenario_of(zone_set: str, zones: int) -> str:
    """The scenario a zone set belongs to: its directory, single-zone or multi-zone ("files" for a file given
    directly)."""
    head = zone_set.rsplit("/", 1)[0] if "/" in zone_set else "files"
    return f"{head} ({'multi' if zones > 1 else 'single'})"


def by_scenario(cases: Sequence[CaseResult]) -> dict[str, list[CaseResult]]:
    """Cases grouped by ``scenario_of``, in first-seen order."""
    groups: dict[str, list[CaseResult]] = {}
    for c in cases:
        groups.setdefault(scenario_of(c.zone_set, c.zones), []).append(c)
    return groups


def all_results(cases: Sequence[CaseResult], policy: str) -> list[SimResult]:
    return [r for c in cases for r in c.results(policy)]
