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

    # avail[t, b, z] and price[t, b, z] for each start's window (no spot past the end of the traces), laid out
    # tick-major so that each tick's slice is contiguous.
    n = zones.ticks
    avail_full = np.zeros((n_z, n + horizon), dtype=bool)
    price_full = np.full((n_z, n + horizon), spec.spot_price, dtype=np.float64)
    for z, tr in enumerate(zones.zones):
        avail_full[z, :n] = tr.available
        if tr.prices is not None:
            price_full[z, :n] = tr.prices
    idx = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(horizon)[None, :]
    down = np.ascontiguousarray(~avail_full[:, idx].transpose(2, 1, 0))      # (T, B, Z): no spot
    price = np.ascontiguousarray(price_full[:, idx].transpose(2, 1, 0)) * gap   # cost of one spot tick
    rate = price / gap                                                          # spot's price per hour

    # The states, updated in place tick by tick (inside the loop only the finishing tail allocates). Every
    # value is the same sum of the same terms, in the same order, as in the plain form
    # "new = where(available, min(old, start), inf) + price": only the buffers differ, not one bit of a result.
    inf = np.inf
    levels = w_max + 1
    idle = np.full((b_n, levels), inf)
    idle[:, 0] = 0.0
    od = np.full((b_n, levels), inf)
    sp = np.full((b_n, n_z, levels), inf)
    best = np.full(b_n, inf)
    any_state = np.empty((b_n, levels))
    sp_min = np.empty((b_n, levels))
    start = np.full((b_n, levels), inf)       # its first ``ovh`` levels stay inf: a launch adds ovh steps
    start_to = start[:, ovh:] if ovh < levels else None
    from_any = levels - ovh
    idle_to = idle[:, m:] if m < levels else None
    idle_from = levels - m
    steps = np.arange(levels) * q

    for t in range(horizon):
        np.minimum(idle, od, out=any_state)
        np.min(sp, axis=1, out=sp_min)
        np.minimum(any_state, sp_min, out=any_state)
        if start_to is not None:
            start_to[...] = any_state[:, :from_any]             # a new instance pays one overhead of waste
        # An idle tick wastes one gap (m steps): idle's first m levels are inf from here on.
        if idle_to is not None:
            idle_to[...] = any_state[:, :idle_from]
            idle[:, :m] = inf
        else:
            idle.fill(inf)
        np.minimum(od, start, out=od)
        np.minimum(sp, start[:, None, :], out=sp)
        gone = down[t]
        if gone.any():
            sp[gone] = inf
        # States that reach the work C during this tick finish at C + w*q; only that part of the tick is billed.
        w_done = math.floor(((t + 1) * gap - c) / q + _EPS)
        if w_done >= 0:
            hi = min(w_done, w_max) + 1
            used = np.clip(c + steps[:hi] - t * gap, 0.0, gap)           # billed part of this tick
            fin_od = (od[:, :hi] + used[None, :]).min(axis=1)
            fin_sp = (sp[:, :, :hi] + rate[t, :, :, None] * used[None, None, :]).min(axis=(1, 2))
            np.minimum(best, np.minimum(fin_od, fin_sp), out=best)
            od[:, :hi] = inf
            sp[:, :, :hi] = inf
        od += gap
        sp += price[t, :, :, None]
        if (t + 1) * gap >= d_line - _EPS:
            break
    del d_line
    norm = spec.on_demand_cost
    return [
        OptimumResult(int(s), None if not np.isfinite(v) else float(v),
                      None if not np.isfinite(v) else float(v) / norm, q, exact)
        for s, v in zip(starts, best, strict=True)
    ]
