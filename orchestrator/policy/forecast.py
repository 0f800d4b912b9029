"""Forecasts from a zone's past: spot lifetimes and outage lengths estimated from the run lengths seen so far.

Everything here reads a ``ZoneStats`` (what has been seen, never the future) and returns hours. Each estimate
is shrunk towards a fixed prior (an exponential run of ``UP_PRIOR_H`` / ``DOWN_PRIOR_H`` hours worth
``PRIOR_RUNS`` runs), so a zone with little history is neither trusted nor distrusted much. The priors are
constants of the method, not fitted to any trace.
"""

from __future__ import annotations

import bisect
import math
import weakref
from dataclasses import dataclass

from orchestrator.policy.model import ZoneStats

UP_PRIOR_H = 2.0
DOWN_PRIOR_H = 1.0
PRIOR_RUNS = 1.0
#: Run lengths are sums of ticks: a run "as long as" the streak may differ from it by float noise.
_TICK_EPS_H = 1e-7


@dataclass(frozen=True, slots=True)
class RunTable:
    """One zone's ended runs of one kind, sorted, with suffix sums: tail expectations in O(log n)."""

    sorted_h: tuple[float, ...]
    suffix: tuple[float, ...]     # suffix[i] = sum(sorted_h[i:])

    @classmethod
    def of(cls, runs: list[float]) -> RunTable:
        ordered = sorted(runs)
        suffix = [0.0] * (len(ordered) + 1)
        for i in range(len(ordered) - 1, -1, -1):
            suffix[i] = suffix[i + 1] + ordered[i]
        return cls(tuple(ordered), tuple(suffix))

    def tail(self, y: float) -> tuple[int, float]:
        """(how many runs are longer than y, the sum of their excess over y)."""
        i = bisect.bisect_right(self.sorted_h, y)
        count = len(self.sorted_h) - i
        return count, self.suffix[i] - y * count


class RunTables:
    """Caches each ZoneStats's sorted run tables until its run list changes (one per policy object).

    Keyed by the object's identity, checked through a weak reference: the daemon builds new ZoneStats every
    tick, and CPython hands a freed object's id to the next one, so an id alone could return another
    zone's table. An entry goes when its ZoneStats does."""

    def __init__(self, recent: int | None = None) -> None:
        self.recent = recent
        self._cache: dict[tuple[int, bool], tuple[weakref.ref[ZoneStats], tuple[int, int], RunTable]] = {}

    def table(self, stats: ZoneStats, up: bool) -> RunTable:
        runs = stats.up_runs if up else stats.down_runs
        version = (stats.runs_recorded, len(runs))
        key = (id(stats), up)
        hit = self._cache.get(key)
        if hit is not None and hit[0]() is stats and hit[1] == version:
            return hit[2]
        table = RunTable.of(runs[-self.recent:] if self.recent else runs)
        cache = self._cache
        self._cache[key] = (weakref.ref(stats, lambda _gone: cache.pop(key, None)), version, table)
        return table

    def clear(self) -> None:
        self._cache.clear()


def mean_run(tables: RunTables, stats: ZoneStats, up: bool) -> float:
    """Mean length of an ended run (up or down), shrunk to the prior."""
    table = tables.table(stats, up)
    prior = UP_PRIOR_H if up else DOWN_PRIOR_H
    return (table.suffix[0] + PRIOR_RUNS * prior) / (len(table.sorted_h) + PRIOR_RUNS)


def up_fraction(stats: ZoneStats) -> float:
    """Share of time spot was available, shrunk to the priors' share (worth one prior cycle of hours)."""
    cycle = UP_PRIOR_H + DOWN_PRIOR_H
    return (stats.up_h + UP_PRIOR_H * PRIOR_RUNS) / (stats.seen_h + cycle * PRIOR_RUNS)


def residual(tables: RunTables, stats: ZoneStats, up: bool, age_h: float) -> float:
    """Expected time left of a run (up or down) that has lasted at least ``age_h``: E[X - a | X >= a] over
    the ended runs and the prior. A run already longer than every one seen is expected to last about as long
    again (runs are long-tailed: the longer a state has lasted, the longer it tends to last)."""
    prior = UP_PRIOR_H if up else DOWN_PRIOR_H
    count, excess = tables.table(stats, up).tail(age_h - _TICK_EPS_H)
    weight = PRIOR_RUNS * math.exp(-age_h / prior)
    if count == 0:
        return max(prior, age_h)
    return max((excess - count * _TICK_EPS_H + weight * prior) / (count + weight), 0.0)


def excess_mean(tables: RunTables, stats: ZoneStats, up: bool, y: float) -> float:
    """E[(X - y)^+] for a fresh run X (up or down), over the ended runs and the prior."""
    prior = UP_PRIOR_H if up else DOWN_PRIOR_H
    table = tables.table(stats, up)
    _, excess = table.tail(y)
    prior_excess = PRIOR_RUNS * prior * math.exp(-max(y, 0.0) / prior)
    return (excess + prior_excess) / (len(table.sorted_h) + PRIOR_RUNS)


def survival(tables: RunTables, stats: ZoneStats, age_h: float, hours: float) -> float:
    """P(an available run that has lasted ``age_h`` lasts ``hours`` more), over the ended runs with one
    pseudo-run on each side ((longer + 1) / (as long + 1)): a zone with no such runs is given 1."""
    table = tables.table(stats, True)
    reached, _ = table.tail(age_h - _TICK_EPS_H)
    survived, _ = table.tail(age_h + hours)
    return (survived + 1) / (reached + 1)
