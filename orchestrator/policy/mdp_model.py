"""A semi-Markov model of spot availability, learned from the run lengths seen so far (orch-mdp's model).

Availability alternates available runs and outages. Each kind's run length is modelled over age buckets
(``age_edges``: one step wide up to ``LINEAR_STEPS`` steps, then doubling, the last open) by the odds of ending
within the next step (``end_odds``): discrete-time in the one-step buckets, from a hazard rate in the wider
ones, over the ended runs kept (``ZoneStats.up_runs`` / ``down_runs``), the run in progress as a censored one
and a prior: an exponential run of ``UP_PRIOR_H`` / ``DOWN_PRIOR_H`` worth ``PRIOR_RUNS`` run (a bucket no run
reached has the prior's odds). Long-tailed runs give falling hazards: an outage that has lasted is expected to
last, a run that has lasted is expected to survive.

The chain over (state, age bucket) steps ``step_h`` at a time: a run in bucket b ends with its odds (then
the other kind starts, at age 0), else it moves to the next bucket with
probability step / width_b (exact for the one-step buckets) or stays. The constants are the method's, the
same for every trace.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from orchestrator.policy.model import ZoneStats

UP_PRIOR_H = 2.0
DOWN_PRIOR_H = 1.0
PRIOR_RUNS = 1.0
#: Buckets one step wide before the widths start doubling, and how many doubling buckets follow.
LINEAR_STEPS = 8
DOUBLING = 4


def age_edges(step_h: float) -> np.ndarray:
    """Lower edges of the age buckets (hours), and +inf: 0, s, ..., 8s, 16s, 32s, 64s, 128s, inf."""
    edges = [i * step_h for i in range(LINEAR_STEPS + 1)]
    for _ in range(DOUBLING):
        edges.append(edges[-1] * 2)
    edges.append(math.inf)
    return np.asarray(edges)


def bucket_of(age_h: float, edges: np.ndarray) -> int:
    """The bucket of a run that has lasted ``age_h`` (0 <= index < len(edges) - 1). ``bisect_right`` is
    ``np.searchsorted(side="right")`` without numpy's per-call cost (the policy asks at every idle tick)."""
    return min(bisect_right(edges, age_h + 1e-9) - 1, len(edges) - 2)


def end_odds(
    runs: list[float], censored_h: float | None, prior_h: float, edges: np.ndarray, step_h: float
) -> np.ndarray:
    """Per age bucket, the probability that a run in it ends within the next step; ``censored_h`` is a run in
    progress of that age (None: none), counted where it is known to have lasted.

    A one-step bucket: (runs that ended in it + the prior's) / (runs that reached it + the prior's), the
    discrete-time (Kaplan-Meier) estimate, exact for runs that last whole steps. A wider bucket: the hazard
    rate (ends + the prior's) / (hours spent in it + the prior's), 1 - exp(-rate x step) per step.
    """
    lo, hi = edges[:-1], edges[1:]
    lengths = np.asarray(runs, dtype=np.float64)
    # A run of exactly an edge's length ends in the bucket below it (it did not outlive that age).
    ends = np.bincount(
        np.clip(np.searchsorted(hi, lengths - 1e-9, side="left"), 0, len(lo) - 1), minlength=len(lo)
    ).astype(np.float64)
    reached = (lengths[:, None] > lo[None, :] + 1e-9).sum(axis=0).astype(np.float64)
    spans = lengths
    if censored_h is not None:
        reached += censored_h >= hi - 1e-9
        spans = np.append(lengths, censored_h)
    hours = np.clip(spans[:, None] - lo[None, :], 0.0, hi - lo).sum(axis=0)
    reach = np.exp(-lo / prior_h)
    leave = np.exp(-np.where(np.isfinite(hi), hi, np.inf) / prior_h)
    prior_ends = PRIOR_RUNS * (reach - leave)
    one_step = (hi - lo) <= step_h + 1e-9
    discrete = (ends + prior_ends) / (reached + PRIOR_RUNS * reach)
    rate = (ends + prior_ends) / np.maximum(hours + PRIOR_RUNS * prior_h * (reach - leave), 1e-12)
    return np.where(one_step, discrete, 1.0 - np.exp(-rate * step_h))


@dataclass(frozen=True, slots=True)
class AvailabilityChain:
    """The chain over (available?, age bucket): ``up[a]`` whether state a is available, ``trans[a, a']``."""

    up: np.ndarray  # (A,) bool: the first half available buckets, then outage buckets
    trans: np.ndarray  # (A, A) float64, rows sum to 1
    edges: np.ndarray  # the age buckets' edges (both kinds)
    up_end: np.ndarray  # per bucket, the odds of ending within a step
    down_end: np.ndarray

    def state(self, available: bool, age_h: float) -> int:
        b = bucket_of(age_h, self.edges)
        return b if available else len(self.edges) - 1 + b


def chain(stats: ZoneStats, step_h: float) -> AvailabilityChain:
    """The chain learned from ``stats`` (the run in progress counted as censored at its age)."""
    edges = age_edges(step_h)
    n = len(edges) - 1
    age = max(stats.streak_h, 0.0)
    h_up = end_odds(stats.up_runs, age if stats.available and stats.seen_h > 0 else None, UP_PRIOR_H, edges, step_h)
    h_dn = end_odds(
        stats.down_runs, age if not stats.available and stats.seen_h > 0 else None, DOWN_PRIOR_H, edges, step_h
    )
    widths = edges[1:] - edges[:-1]
    advance = np.where(np.isfinite(widths), step_h / np.where(np.isfinite(widths), widths, 1.0), 0.0)
    trans = np.zeros((2 * n, 2 * n))
    for half, end in ((0, h_up), (1, h_dn)):
        for b in range(n):
            a = half * n + b
            other = (1 - half) * n
            trans[a, other] += end[b]
            if b + 1 < n:
                trans[a, a + 1] += (1 - end[b]) * advance[b]
                trans[a, a] += (1 - end[b]) * (1 - advance[b])
            else:
                trans[a, a] += 1 - end[b]
    up = np.arange(2 * n) < n
    return AvailabilityChain(up, trans, edges, h_up, h_dn)


def residual_life(runs: list[float], age_h: float, prior_h: float) -> float:
    """E[X - a | X >= a] over the ended runs and an exponential prior worth ``PRIOR_RUNS`` (weighed by its odds
    of reaching age a); a run older than every one seen is expected to last about as long again."""
    longer = [x - age_h for x in runs if x >= age_h - 1e-7]
    if not longer:
        return max(prior_h, age_h)
    weight = PRIOR_RUNS * math.exp(-age_h / prior_h)
    return (sum(longer) + weight * prior_h) / (len(longer) + weight)


def mean_up(stats: ZoneStats) -> float:
    """Mean available run, shrunk to the prior."""
    return (sum(stats.up_runs) + PRIOR_RUNS * UP_PRIOR_H) / (len(stats.up_runs) + PRIOR_RUNS)
