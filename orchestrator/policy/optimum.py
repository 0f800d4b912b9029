"""The offline optimum: the cheapest schedule with full knowledge of the trace, by dynamic programming.

It is a true lower bound on the cost of any schedule under the simulator's rules, and exact up to one
rounding, stated here. The DP state after each tick is (instance, waste), where waste = elapsed time minus
work done = idle time plus overheads paid. A job that has wasted w finishes at C + w, which must be <= D, so
waste lives on a grid 0..(D - C) of step q = gap / m (m chosen so the grid has at most ``max_levels``
steps). An idle tick adds exactly one gap (m steps). A new instance adds floor(d / q) steps, i.e. each
overhead is rounded DOWN to the grid (by less than q; exact when q divides d). Rounding down only lets the
DP finish earlier and cheaper than the rules allow, never later or dearer, so the result is <= the true
optimum; with q dividing both gap and d it equals it. Relaunching the same zone is allowed (pointless, but a
legal schedule). Ticks past a trace's end have no spot.

numpy is imported lazily (``orch quote`` never pays for it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.simulator import window_ticks
from orchestrator.policy.traces import ZoneSet

_EPS = 1e-9
#: The DP's waste grid: at most this many steps over the slack (``waste_grid``).
DEFAULT_MAX_LEVELS = 1500


@dataclass(frozen=True, slots=True)
class OptimumResult:
    """Per start tick: the optimum cost (None if no schedule meets the deadline) and its normalized value."""

    start_tick: int
    cost: float | None
    normalized_cost: float | None
    waste_step_h: float
    exact: bool


def waste_grid(spec: ProblemSpec, gap_h: float, max_levels: int) -> tuple[int, float]:
    """(m, q): the waste step q = gap / m.

    When the gap and the overhead are whole seconds, q is their greatest common divisor if the slack then
    needs at most ``max_levels`` steps: every waste (idle ticks and overheads) is a whole number of such steps,
    so the grid is exact, and as coarse as exactness allows (the DP's cost is proportional to its steps).
    Otherwise q is as fine as ``max_levels`` steps over the slack allow; among the finest quarter of those, one
    that holds the overhead exactly when there is one."""
    gap_s, ovh_s = gap_h * 3600.0, spec.overhead_h * 3600.0
    if min(gap_s, ovh_s) >= 0 and abs(gap_s - round(gap_s)) < 1e-6 and abs(ovh_s - round(ovh_s)) < 1e-6 \
            and round(gap_s) > 0:
        step_s = math.gcd(round(gap_s), round(ovh_s))
        if (spec.deadline_h - spec.work_h) * 3600.0 / step_s <= max_levels:
            return round(gap_s) // step_s, gap_h * step_s / round(gap_s)
    m_max = max(1, math.floor(max_levels * gap_h / (spec.deadline_h - spec.work_h)))
    for m in range(m_max, max(1, m_max // 4) - 1, -1):
        steps = spec.overhead_h * m / gap_h
        if abs(steps - round(steps)) < 1e-9:
            return m, gap_h / m
    return m_max, gap_h / m_max


def optimum(spec: ProblemSpec, zones: ZoneSet, starts: Sequence[int], max_levels: int = DEFAULT_MAX_LEVELS,
            ) -> list[OptimumResult]:
    """The offline optimum for a job starting at each of ``starts`` (all solved at once, vectorized)."""
    import numpy as np

    gap = zones.gap_h
    horizon = window_ticks(spec, gap)
    n_z = len(zones.zones)
    b_n = len(starts)
    m, q = waste_grid(spec, gap, max_levels)
    w_max = math.floor((spec.deadline_h - spec.work_h) / q + _EPS)
    ovh = math.floor(spec.overhead_h / q + _EPS)
    exact = abs(ovh * q - spec.overhead_h) < 1e-9
    c, d_line = spec.work_h, spec.deadline_h

    # avail[b, z, t] and price[b, z, t] for each start's window (no spot past the end of the traces).
    n = zones.ticks
    avail_full = np.zeros((n_z, n + horizon), dtype=bool)
    price_full = np.full((n_z, n + horizon), spec.spot_price, dtype=np.float64)
    for z, tr in enumerate(zones.zones):
        avail_full[z, :n] = tr.available
        if tr.prices is not None:
            price_full[z, :n] = tr.prices
    idx = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(horizon)[None, :]
    avail = avail_full[:, idx].transpose(1, 0, 2)          # (B, Z, T)
    price = price_full[:, idx].transpose(1, 0, 2) * gap     # cost of one spot tick

    inf = np.inf
    levels = w_max + 1
    idle = np.full((b_n, levels), inf)
    idle[:, 0] = 0.0
    od = np.full((b_n, levels), inf)
    sp = np.full((b_n, n_z, levels), inf)
    best = np.full(b_n, inf)

    def shifted(x: np.ndarray, s: int) -> np.ndarray:
        out = np.full_like(x, inf)
        if s < levels:
            out[..., s:] = x[..., : levels - s]
        return out

    for t in range(horizon):
        any_state = np.minimum(np.minimum(idle, od), sp.min(axis=1))
        start = shifted(any_state, ovh)                     # a new instance pays one overhead of waste
        new_idle = shifted(any_state, m)                    # an idle tick wastes one gap
        od_base = np.minimum(od, start)
        sp_base = np.where(avail[:, :, t, None], np.minimum(sp, start[:, None, :]), inf)
        # States that reach the work C during this tick finish at C + w*q; only that part of the tick is billed.
        w_done = math.floor(((t + 1) * gap - c) / q + _EPS)
        if w_done >= 0:
            hi = min(w_done, w_max) + 1
            used = np.clip(c + np.arange(hi) * q - t * gap, 0.0, gap)        # billed part of this tick
            fin_od = (od_base[:, :hi] + used[None, :]).min(axis=1)
            fin_sp = (sp_base[:, :, :hi] + (price[:, :, t, None] / gap) * used[None, None, :]).min(axis=(1, 2))
            best = np.minimum(best, np.minimum(fin_od, fin_sp))
            od_base[:, :hi] = inf
            sp_base[:, :, :hi] = inf
        od = od_base + gap
        sp = sp_base + price[:, :, t, None]
        idle = new_idle
        if (t + 1) * gap >= d_line - _EPS:
            break
    del d_line
    norm = spec.on_demand_cost
    return [
        OptimumResult(int(s), None if not np.isfinite(v) else float(v),
                      None if not np.isfinite(v) else float(v) / norm, q, exact)
        for s, v in zip(starts, best, strict=True)
    ]
