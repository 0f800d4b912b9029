"""Replay one job on a zone set under one policy, applying the problem's rules exactly (see model.py).

Within a tick, a new instance first pays what is left of its overhead, then makes progress; the job may
finish part-way through a tick, and then only the part used is billed (per-second billing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import groupby

from orchestrator.policy.base import SpotPolicy
from orchestrator.policy.model import WAIT, Action, Mode, ProblemSpec, ZoneStats
from orchestrator.policy.observation import new_observation
from orchestrator.policy.traces import ZoneSet

_EPS = 1e-9
#: How much of the trace before a job's start its policy is shown ("what the trace so far says"), as a daemon
#: keeps two weeks of a zone's availability record.
HISTORY_H = 14 * 24.0


class PolicyError(RuntimeError):
    """A policy asked for something the rules forbid (spot in a zone that has none)."""


@dataclass(frozen=True, slots=True)
class TickRecord:
    tick: int
    available: tuple[bool, ...]
    action: str
    work_done_h: float
    cost: float


@dataclass(frozen=True, slots=True)
class SimResult:
    """One job's outcome. ``normalized_cost`` is cost / the cost of on-demand alone (work + one overhead).

    ``finish_h`` is None when the job did not finish by the deadline (``met`` False; cost is then what was
    billed up to the deadline). ``switches`` counts changes from one running instance straight to another
    (zone or market); ``launches`` counts every new instance, switches included.
    """

    policy: str
    zone_set: str
    start_tick: int
    cost: float
    normalized_cost: float
    met: bool
    finish_h: float | None
    preemptions: int
    switches: int
    launches: int
    spot_h: float
    on_demand_h: float
    log: tuple[TickRecord, ...] | None = None


class _Prepared:
    """What every replay on one zone set shares, computed once: the availability by tick (a tuple of zones per
    tick) and, per start tick, the zones' history before it (copied out for each replay, which changes it)."""

    __slots__ = ("_history", "any_up", "columns", "zones")

    def __init__(self, zones: ZoneSet) -> None:
        self.zones = zones
        # Each zone's first ``ticks`` ticks (the set's length is its first trace's).
        self.columns = tuple(zip(*(z.available[: zones.ticks] for z in zones.zones), strict=False))
        self.any_up = tuple(any(col) for col in self.columns)
        self._history: dict[int, tuple[tuple[ZoneStats, ...], ZoneStats]] = {}

    def history_before(self, start_tick: int) -> tuple[tuple[ZoneStats, ...], ZoneStats]:
        """Fresh copies of what the trace so far says at ``start_tick``: each zone as seen in the
        ``HISTORY_H`` hours before it, and "some zone has spot" over the same ticks."""
        kept = self._history.get(start_tick)
        if kept is None:
            gap = self.zones.gap_h
            first = max(0, start_tick - math.floor(HISTORY_H / gap))
            history = tuple(ZoneStats() for _ in self.zones.zones)
            for z, trace in enumerate(self.zones.zones):
                for state, run in groupby(trace.available[first:start_tick]):
                    history[z].observe_run(state, sum(1 for _ in run), gap)
            any_zone = ZoneStats()
            for state, run in groupby(self.any_up[first:start_tick]):
                any_zone.observe_run(state, sum(1 for _ in run), gap)
            kept = self._history[start_tick] = (history, any_zone)
        return tuple(_copied(h) for h in kept[0]), _copied(kept[1])


def _copied(stats: ZoneStats) -> ZoneStats:
    return replace(stats, up_runs=list(stats.up_runs), down_runs=list(stats.down_runs))


#: The zone sets replayed last, by identity (each entry holds its set, so an id is never reused while kept).
_PREPARED: dict[int, _Prepared] = {}
_PREPARED_KEPT = 4


def _prepared(zones: ZoneSet) -> _Prepared:
    found = _PREPARED.get(id(zones))
    if found is None or found.zones is not zones:
        if len(_PREPARED) >= _PREPARED_KEPT:
            del _PREPARED[next(iter(_PREPARED))]
        found = _PREPARED[id(zones)] = _Prepared(zones)
    return found


def window_ticks(spec: ProblemSpec, gap_h: float) -> int:
    """Ticks from a job's start to its deadline (the last one may be cut by the deadline)."""
    return math.ceil(spec.deadline_h / gap_h - _EPS)


def simulate(
    spec: ProblemSpec,
    zones: ZoneSet,
    policy: SpotPolicy,
    start_tick: int = 0,
    notice: bool = False,
    keep_log: bool = False,
) -> SimResult:
    """Run ``policy`` for one job starting at tick ``start_tick`` of ``zones``.

    Ticks past the end of the traces have no spot anywhere. With ``notice``, the policy is told one tick
    ahead which zones will lose spot (as a cloud's preemption notice would). The policy's per-zone history
    starts with the ``HISTORY_H`` hours of the trace before ``start_tick`` (never anything after ``now``).
    A policy that declares ``keeps_paid_spot`` or ``keeps_on_demand`` (base.py) is not asked at the ticks
    where it has promised its answer: the replay takes that answer, and is otherwise the same.
    """
    gap = zones.gap_h
    n_zones = len(zones.zones)
    total_ticks = zones.ticks
    horizon = window_ticks(spec, gap)
    prepared = _prepared(zones)
    price_rows = [z.prices for z in zones.zones]
    # Without price series every tick's prices are the same tuple: built once (the replay's inner loop).
    no_series = all(row is None for row in price_rows)
    flat = (spec.spot_price,) * n_zones
    k = spec.spot_price
    d = spec.overhead_h
    work = spec.work_h
    deadline = spec.deadline_h
    # Optional declarations, read from the policy's own class only: a subclass (a user's, built on UP) may
    # read the history its base did not, or answer differently where its base promised an answer.
    declared = vars(type(policy))
    # ``needs_history = False`` (the reference policies: they read only this tick): shown no history (``()``
    # and None), which spares the replay a ZoneStats update per zone and tick.
    keeps_history = declared.get("needs_history", True)
    keeps_paid_spot = declared.get("keeps_paid_spot", False)
    keeps_on_demand = declared.get("keeps_on_demand", False)
    history, any_zone = prepared.history_before(start_tick) if keeps_history else ((), None)
    # One zone: "some zone has spot" is that zone, tick for tick (the same ZoneStats values, built and updated
    # by the same calls), so it is shown that zone's record and not kept twice.
    own_any = n_zones > 1
    if keeps_history and not own_any:
        any_zone = history[0]
    no_notice: tuple[bool, ...] = ()

    policy.reset(spec, n_zones)
    mode = Mode.IDLE
    zone: int | None = None
    action: Action = WAIT
    ovh_left = 0.0
    done = 0.0
    cost = 0.0
    spot_h = od_h = 0.0
    preemptions = switches = launches = 0
    finish: float | None = None
    log: list[TickRecord] | None = [] if keep_log else None

    # The window's availability, tick by tick, and one tick more (the notice looks ahead); none past the end.
    window = prepared.columns[start_tick : start_tick + horizon + 1]
    if len(window) < horizon + 1:
        window += ((False,) * n_zones,) * (horizon + 1 - len(window))
    decide = policy.decide
    for t in range(horizon):
        idx = start_tick + t
        now = window[t]
        elapsed = t * gap
        preempted = False
        if mode is Mode.SPOT and not now[zone]:  # type: ignore[index]
            preempted = True
            preemptions += 1
            mode, zone, ovh_left = Mode.IDLE, None, 0.0
            action = WAIT
        if keeps_history:
            for z in range(n_zones):
                history[z].observe(now[z], gap)
            if own_any:
                any_zone.observe(any(now), gap)  # type: ignore[union-attr]
        past_end = idx >= total_ticks
        if (mode is Mode.SPOT and keeps_paid_spot and ovh_left == 0.0) or (mode is Mode.ON_DEMAND and keeps_on_demand):
            # The policy's promised answer: the instance it is on (``action`` is still the one that chose it).
            price = (
                1.0
                if mode is Mode.ON_DEMAND
                else (k if past_end or no_series or price_rows[zone] is None else price_rows[zone][idx])
            )  # type: ignore
        else:
            prices = flat if past_end or no_series else tuple(k if row is None else row[idx] for row in price_rows)
            nxt = window[t + 1]
            obs = new_observation(
                t,
                elapsed,
                gap,
                spec,
                done,
                mode,
                zone,
                ovh_left,
                now,
                prices,
                tuple(now[z] and not nxt[z] for z in range(n_zones)) if notice else no_notice,
                preempted,
                history,
                any_zone,
                cost,
            )
            action = decide(obs)
            if action.mode is Mode.SPOT and (
                action.zone is None or not 0 <= action.zone < n_zones or not now[action.zone]
            ):
                raise PolicyError(f"{policy.name}: tick {t}: asked for {action} but spot there is not available")
            if action.mode is Mode.IDLE:
                mode, zone, ovh_left = Mode.IDLE, None, 0.0
            elif action.mode is not mode or action.zone != zone:
                if mode is not Mode.IDLE:
                    switches += 1
                launches += 1
                mode, zone, ovh_left = action.mode, action.zone, d
            if mode is not Mode.IDLE:
                price = 1.0 if mode is Mode.ON_DEMAND else prices[zone]  # type: ignore[index]
        if mode is not Mode.IDLE:
            # A deadline part-way through the tick cuts it: what lies past the deadline is never run.
            span = min(gap, deadline - elapsed)
            paid_ovh = min(span, ovh_left)
            productive = span - paid_ovh
            left = work - done
            if productive >= left - _EPS:
                billed = paid_ovh + left
                finish = elapsed + billed
                done = work
                stop = True
            else:
                billed = span
                ovh_left -= paid_ovh
                done += productive
                stop = False
            cost += price * billed
            if mode is Mode.ON_DEMAND:
                od_h += billed
            else:
                spot_h += billed
            if log is not None:
                log.append(TickRecord(t, now, str(action), done, cost))
            if stop:
                break
        elif log is not None:
            log.append(TickRecord(t, now, str(action), done, cost))
    met = finish is not None and finish <= spec.deadline_h + _EPS
    return SimResult(
        policy=policy.name,
        zone_set=zones.name,
        start_tick=start_tick,
        cost=cost,
        normalized_cost=cost / spec.on_demand_cost,
        met=met,
        finish_h=finish,
        preemptions=preemptions,
        switches=switches,
        launches=launches,
        spot_h=spot_h,
        on_demand_h=od_h,
        log=tuple(log) if log is not None else None,
    )
