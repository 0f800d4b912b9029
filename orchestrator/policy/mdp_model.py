"""A semi-Markov model of spot availability, learned from the run lengths seen so far (orch-mdp's model).

Availability alternates available runs and outages. Each kind's run length is modelled by a piecewise-constant
hazard over age buckets (``age_edges``: one step wide up to ``LINEAR_STEPS`` steps, then doubling, the last
open): the hazard of bucket b is (runs that ended in it) / (hours runs spent in it), the maximum-likelihood
estimate of a piecewise-exponential law, over the ended runs kept (``ZoneStats.up_runs`` / ``down_runs``),
the run in progress as a censored one (its hours count, no end) and a prior: an exponential run of
``UP_PRIOR_H`` / ``DOWN_PRIOR_H`` worth ``PRIOR_RUNS`` run (it adds its expected ends and hours to each
bucket, so a bucket no run reached has the prior's hazard). Long-tailed runs give falling hazards: an outage
that has lasted is expected to last, a run that has lasted is expected to survive.

The chain over (state, age bucket) steps ``step_h`` at a time: a run in bucket b ends with probability
1 - exp(-hazard_b x step) (then the other kind starts, at age 0), else it moves to the next bucket with
probability step / width_b (exact for the one-step buckets) or stays. The constants are the method's, the
same for every trace.
"""

from __future__ import annotations

import math
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
    """The bucket of a run that has lasted ``age_h`` (0 <= index < len(edges) - 1)."""
    return int(min(np.searchsorted(edges, age_h + 1e-9, side="right") - 1, len(edges) - 2))


def hazards(runs: list[float], censored_h: float | None, prior_h: float, edges: np.ndarray) -> np.ndarray:
    """Per-hour hazard in each age bucket: (ends + the prior's) / (hours + the prior's); ``censored_h`` is a
    run in progress of that age (None: none)."""
    lo, hi = edges[:-1], edges[1:]
    lengths = np.asarray(runs, dtype=np.float64)
    # A run of exactly an edge's length ends in the bucket below it (it did not outlive that age).
    ends = np.bincount(np.clip(np.searchsorted(hi, lengths - 1e-9, side="left"), 0, len(lo) - 1),
                       minlength=len(lo)).astype(np.float64)
    spans = np.concatenate([lengths, [censored_h]]) if censored_h is not None else lengths
    hours = np.clip(spans[:, None] - lo[None, :], 0.0, hi - lo).sum(axis=0) if len(spans) else np.zeros(len(lo))
    reach = np.exp(-lo / prior_h)
    leave = np.where(np.isfinite(hi), np.exp(-np.where(np.isfinite(hi), hi, 0.0) / prior_h), 0.0)
    prior_ends = PRIOR_RUNS * (reach - leave)
    prior_hours = PRIOR_RUNS * prior_h * (reach - leave)
    return (ends + prior_ends) / np.maximum(hours + prior_hours, 1e-12)


@dataclass(frozen=True, slots=True)
class AvailabilityChain:
    """The chain over (available?, age bucket): ``up[a]`` whether state a is available, ``trans[a, a']``."""

    up: np.ndarray          # (A,) bool: the first half available buckets, then outage buckets
    trans: np.ndarray       # (A, A) float64, rows sum to 1
    edges: np.ndarray       # the age buckets' edges (both kinds)
    up_hazard: np.ndarray   # per-hour hazards, for tests and the re-solve check
    down_hazard: np.ndarray

    def state(self, available: bool, age_h: float) -> int:
        b = bucket_of(age_h, self.edges)
        return b if available else len(self.edges) - 1 + b


def chain(stats: ZoneStats, step_h: float) -> AvailabilityChain:
    """The chain learned from ``stats`` (the run in progress counted as censored at its age)."""
    edges = age_edges(step_h)
    n = len(edges) - 1
    age = max(stats.streak_h, 0.0)
    h_up = hazards(stats.up_runs, age if stats.available and stats.seen_h > 0 else None, UP_PRIOR_H, edges)
    h_dn = hazards(stats.down_runs, age if not stats.available and stats.seen_h > 0 else None, DOWN_PRIOR_H,
                   edges)
    widths = edges[1:] - edges[:-1]
    advance = np.where(np.isfinite(widths), step_h / np.where(np.isfinite(widths), widths, 1.0), 0.0)
    trans = np.zeros((2 * n, 2 * n))
    for half, hz in ((0, h_up), (1, h_dn)):
        end = 1.0 - np.exp(-hz * step_h)
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
