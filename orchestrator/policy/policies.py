"""The reference policies: on-demand only, greedy, and Uniform Progress (Can't Be Late, NSDI 2024).

Sources for greedy and Uniform Progress: Wu, Chiang, et al., "Can't Be Late: Optimizing Spot Instance Savings
under Deadlines", NSDI 2024, §3.3 (Thrifty, Safety Net and Exploitation rules), §3.4 (greedy), §5.2 (Uniform
Progress with hysteresis); and the authors' simulator (skypilot-org/can-t-be-late, sky_spot/strategies/
rc_cr_threshold.py and its multi-region variant), whose tick-discrete forms of the rules are kept here:
the Safety Net fires when ceil((C + 2d)/gap) >= floor(R/gap) ticks, and a spot instance past its overhead is
kept while ceil((C + d)/gap) >= floor(R/gap). On a zone set, "spot available" means any zone has it, and a new
spot instance goes to the cheapest available zone, the first one on ties (as the multi-region variant tries
zones in order).
"""

from __future__ import annotations

import math

from orchestrator.policy.model import ON_DEMAND, WAIT, Action, Mode, Observation, ProblemSpec, spot

_EPS = 1e-9


def whole_ticks(hours: float, gap_h: float) -> int:
    """floor(hours / gap) with a tolerance for float noise."""
    return math.floor(hours / gap_h + _EPS)


def ticks_needed(hours: float, gap_h: float) -> int:
    """ceil(hours / gap) with a tolerance for float noise."""
    return math.ceil(hours / gap_h - _EPS)


def cheapest_available(obs: Observation) -> int | None:
    """The available zone with the lowest spot price now (the lowest index on ties), None if none has spot."""
    best: int | None = None
    for z, up in enumerate(obs.available):
        if up and (best is None or obs.spot_prices[z] < obs.spot_prices[best]):
            best = z
    return best


def paper_safety_net(obs: Observation) -> Action | None:
    """The Safety Net Rule in the authors' tick-discrete form; None when it does not decide.

    Idle or on-demand with no room for two more overheads: on-demand (and so to the end, since the slack of
    a running on-demand instance never grows). On spot with no room for one more overhead: keep the spot
    instance if its overhead is paid (a preemption still leaves one changeover), else on-demand now.
    """
    # whole_ticks and ticks_needed, and Observation's remaining_h and time_left_h, written out: every policy
    # runs this at every tick it is asked (the same arithmetic, without four calls).
    spec, gap = obs.spec, obs.gap_h
    d, c = spec.overhead_h, max(spec.work_h - obs.work_done_h, 0.0)
    left = math.floor((spec.deadline_h - obs.elapsed_h) / gap + _EPS)
    if obs.mode is not Mode.SPOT and math.ceil((c + 2 * d) / gap - _EPS) >= left:
        return ON_DEMAND
    if math.ceil((c + d) / gap - _EPS) >= left:
        if obs.mode is Mode.SPOT and obs.overhead_left_h < 1e-3 / 3600:
            return spot(obs.zone)  # type: ignore[arg-type]
        return ON_DEMAND
    return None


def settled(obs: Observation) -> Action | None:
    """What every spot-seeking policy does before its own rules: nothing left -> WAIT; the Safety Net when
    it decides; a live spot instance is kept (Exploitation). None: the policy's own rules decide."""
    if obs.remaining_h <= 0:
        return WAIT
    forced = paper_safety_net(obs)
    if forced is not None:
        return forced
    if obs.mode is Mode.SPOT:
        return spot(obs.zone)  # type: ignore[arg-type]
    return None


class OnDemandPolicy:
    """On-demand from the first tick to the end: the cost every other policy is normalized by."""

    name = "on-demand"
    needs_history = False  # reads only this tick: the simulator skips the history (simulator.py)
    keeps_on_demand = True  # the simulator need not ask on on-demand (base.py)

    def reset(self, spec: ProblemSpec, zones: int) -> None:
        return None

    def decide(self, obs: Observation) -> Action:
        return WAIT if obs.remaining_h <= 0 else ON_DEMAND


class GreedyPolicy:
    """Spot whenever available (kept until preempted); otherwise wait, until the Safety Net forces on-demand,
    which is then kept to the end (paper §3.4)."""

    name = "greedy"
    needs_history = False  # reads only this tick: the simulator skips the history (simulator.py)
    # On spot with its overhead paid the Safety Net keeps it and so does Exploitation; greedy on on-demand
    # stays (settled, then its own rule): the simulator need not ask then (base.py).
    keeps_paid_spot = True
    keeps_on_demand = True

    def reset(self, spec: ProblemSpec, zones: int) -> None:
        return None

    def decide(self, obs: Observation) -> Action:
        first = settled(obs)
        if first is not None:
            return first
        if obs.mode is Mode.ON_DEMAND:
            return ON_DEMAND
        z = cheapest_available(obs)
        return WAIT if z is None else spot(z)


class UniformProgressPolicy:
    """Uniform Progress with hysteresis and the Safety Net (paper §5.2.2; rc_cr_threshold in the authors' code).

    With cp = work done, ep(t) = t * C0 / D (the progress of a job spread evenly up to its deadline):
    1. Uniform Progress: idle and cp < ep(t) -> on-demand.
    2. Taking Risks: spot whenever available, even when behind; stay on it until preempted (Exploitation).
    3. Hysteresis: on on-demand, stay while cp < ep(t + 2d) or spot is unavailable.
    4. Safety Net (paper_safety_net) overrides all of the above.
    """

    name = "uniform-progress"
    needs_history = False  # reads only this tick: the simulator skips the history (simulator.py)
    # On spot with its overhead paid the Safety Net keeps it and so does Exploitation (``settled``): the
    # simulator need not ask then (base.py). On on-demand it may leave (the hysteresis), so it is asked.
    keeps_paid_spot = True

    def reset(self, spec: ProblemSpec, zones: int) -> None:
        return None

    def choose_zone(self, obs: Observation) -> int | None:
        """Where a new spot instance goes: the cheapest available zone (the first on ties)."""
        return cheapest_available(obs)

    def decide(self, obs: Observation) -> Action:
        first = settled(obs)
        if first is not None:
            return first
        spec = obs.spec
        rate = spec.work_h / spec.deadline_h
        cp = obs.work_done_h
        z = self.choose_zone(obs)
        if obs.mode is Mode.ON_DEMAND and (z is None or cp < rate * (obs.elapsed_h + 2 * spec.overhead_h)):
            return ON_DEMAND
        if z is not None:
            return spot(z)
        if cp < rate * obs.elapsed_h:
            return ON_DEMAND
        return WAIT
