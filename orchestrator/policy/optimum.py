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
from typing import TYPE_CHECKING

from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.simulator import window_ticks
from orchestrator.policy.traces import ZoneSet

if TYPE_CHECKING:
    import numpy as np

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
    if (
        min(gap_s, ovh_s) >= 0
        and abs(gap_s - round(gap_s)) < 1e-6
        and abs(ovh_s - round(ovh_s)) < 1e-6
        and round(gap_s) > 0
    ):
        step_s = math.gcd(round(gap_s), round(ovh_s))
        if (spec.deadline_h - spec.work_h) * 3600.0 / step_s <= max_levels:
            return round(gap_s) // step_s, gap_h * step_s / round(gap_s)
    m_max = max(1, math.floor(max_levels * gap_h / (spec.deadline_h - spec.work_h)))
    for m in range(m_max, max(1, m_max // 4) - 1, -1):
        steps = spec.overhead_h * m / gap_h
        if abs(steps - round(steps)) < 1e-9:
            return m, gap_h / m
    return m_max, gap_h / m_max


def optimum(
    spec: ProblemSpec,
    zones: ZoneSet,
    starts: Sequence[int],
    max_levels: int = DEFAULT_MAX_LEVELS,
) -> list[OptimumResult]:
    """The offline optimum for a job starting at each of ``starts`` (all solved at once, vectorized)."""
    import numpy as np

    gap = zones.gap_h
    horizon = window_ticks(spec, gap)
    n_z = len(zones.zones)
    m, q = waste_grid(spec, gap, max_levels)
    w_max = math.floor((spec.deadline_h - spec.work_h) / q + _EPS)
    ovh = math.floor(spec.overhead_h / q + _EPS)
    exact = abs(ovh * q - spec.overhead_h) < 1e-9

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
    # Per tick, start and market (0: on-demand, 1 + z: spot in zone z), tick-major so each tick's slice is
    # contiguous: no market (spot not available), a tick's cost (on-demand: one gap), the price per hour.
    spot_down = ~avail_full[:, idx].transpose(2, 1, 0)  # (T, B, Z)
    spot_cost = price_full[:, idx].transpose(2, 1, 0) * gap
    down = np.zeros((horizon, len(starts), n_z + 1), dtype=bool)
    down[:, :, 1:] = spot_down
    cost = np.full((horizon, len(starts), n_z + 1), gap)
    cost[:, :, 1:] = spot_cost
    rate = np.ones((horizon, len(starts), n_z + 1))
    rate[:, :, 1:] = spot_cost / gap
    best = _cheapest(_Grid(w_max + 1, m, ovh, q), spec, gap, horizon, down, cost, rate)
    norm = spec.on_demand_cost
    return [
        OptimumResult(
            int(s), None if not np.isfinite(v) else float(v), None if not np.isfinite(v) else float(v) / norm, q, exact
        )
        for s, v in zip(starts, best, strict=True)
    ]


@dataclass(frozen=True, slots=True)
class _Grid:
    """The DP's waste grid: ``levels`` steps of ``q`` hours; an idle tick is ``m`` steps, an overhead ``ovh``."""

    levels: int
    m: int
    ovh: int
    q: float


def _cheapest(
    grid: _Grid, spec: ProblemSpec, gap: float, horizon: int, down: np.ndarray, cost: np.ndarray, rate: np.ndarray
) -> np.ndarray:
    """Per start, the cheapest cost of finishing (inf: none meets the deadline). Per tick t, start b and market
    k (0: on-demand, 1 + z: spot in zone z): ``down[t, b, k]``, not available; ``cost``, a tick's cost;
    ``rate``, the price per hour (cost / gap; on-demand's is 1).

    The DP over (market or idle, waste level), tick by tick, as the module's docstring states it; plainly:
        any = min(idle, od, min over z of sp);  start = any shifted up ovh levels;  idle' = any shifted up m
        od' = min(od, start) (+ gap);  sp'[z] = min(sp[z], start) where z has spot, else inf (+ the price)
        states whose work reaches C this tick finish (billed for the part of the tick used) and leave.
    Computed in place, with savings that change no value (each state is the same sum of the same terms in
    the same order, and a min is exact; tests/policy/test_replay_shortcuts.py compares the plain form):
    * on-demand and the zones' spot are one array of markets (on-demand's price per hour is 1.0, and
      1.0 x the hours used is those hours exactly), so each step is one numpy call for all of them;
    * idle lives in a longer buffer, and "shifted up m levels" moves its view down m places instead of
      copying it; "any" is computed into idle's own view, and the launches read it shifted in place;
    * the lowest level that may be finite is tracked (every level below it is inf), and work starts there:
      in the last third of the window the states that finished leave the bottom levels for good, so the
      updates and the finishing look only at the levels still alive.
    """
    import numpy as np

    inf = np.inf
    levels, m, ovh, q = grid.levels, grid.m, grid.ovh, grid.q
    c, d_line = spec.work_h, spec.deadline_h
    b_n, markets = cost.shape[1], cost.shape[2]
    # idle at tick t is buf[:, off:off + levels]; below its view the buffer is inf (never written).
    room = min(horizon * m, 2 * levels) + m
    buf = np.full((b_n, room + levels), inf)
    off = room
    buf[:, off] = 0.0
    state = np.full((b_n, markets, levels), inf)
    cheapest_market = np.empty((b_n, levels))
    best = np.full(b_n, inf)
    steps = np.arange(levels) * q
    any_down = down.any(axis=(1, 2)).tolist()
    # Levels below these are inf: idle's, and every market's.
    lb_idle, lb = 0, levels
    for t in range(horizon):
        any_state = buf[:, off : off + levels]  # idle now; "any" once the markets are folded in
        if lb < levels:
            alive = any_state[:, lb:]
            if markets <= 3:  # a few elementwise minimums cost less than numpy's reduction over an axis
                for k in range(markets):
                    np.minimum(alive, state[:, k, lb:], out=alive)
            else:
                np.min(state[:, :, lb:], axis=1, out=cheapest_market[:, lb:])
                np.minimum(alive, cheapest_market[:, lb:], out=alive)
        lb_any = min(lb_idle, lb)
        lo = lb_any + ovh  # a new instance pays one overhead of waste
        if lo < levels:
            launch = any_state[:, lb_any : levels - ovh]
            np.minimum(state[:, :, lo:], launch[:, None, :], out=state[:, :, lo:])
            lb = min(lb, lo)
        if any_down[t] and lb < levels:
            state[:, :, lb:][down[t]] = inf
        # States that reach the work C during this tick finish at C + w*q; only that part of the tick is billed.
        w_done = math.floor(((t + 1) * gap - c) / q + _EPS)
        if w_done >= 0:
            hi = min(w_done, levels - 1) + 1
            if lb < hi:
                used = np.clip(c + steps[lb:hi] - t * gap, 0.0, gap)  # billed part of this tick
                np.minimum(best, (state[:, :, lb:hi] + rate[t, :, :, None] * used).min(axis=(1, 2)), out=best)
                state[:, :, lb:hi] = inf
                lb = hi
        if lb < levels:
            state[:, :, lb:] += cost[t, :, :, None]
        # An idle tick wastes one gap: idle next is "any" shifted up m levels, i.e. the view m places lower.
        lb_idle = lb_any + m
        off -= m
        if off < 0:  # out of room: start the buffer again with idle's next view at its top
            moved = np.full((b_n, levels), inf)
            if m < levels:
                moved[:, m:] = any_state[:, : levels - m]
            buf.fill(inf)
            off = room
            buf[:, off : off + levels] = moved
        if (t + 1) * gap >= d_line - _EPS:
            break
    return best
