"""orch-mdp: a finite-horizon MDP over a learned availability model, under Uniform Progress's Safety Net.

The model (``mdp_model.py``): "some zone of the set has spot" as a semi-Markov chain over (available?, age
bucket), its hazards learned from the run lengths seen so far. The MDP (``solve``) steps ``step_h`` at a time
over (time left, slack = time left - work left, instance, availability state) and applies the simulator's
cost rules: a new instance bills ``d`` and makes no progress in it (slack falls by d), spot costs k per hour,
on-demand 1, waiting costs nothing and spends a step of slack, a spot instance whose set loses spot is gone
(the job is idle), and the job is done when the work left reaches 0. In a zone set a preempted zone while the
set keeps spot costs a hop: one more overhead, with probability per step from the zone's and the set's mean
available runs. The Safety Net's states are the net's only choice (on-demand once the slack holds no more than
two overheads and a tick), so the plan agrees with the override the policy keeps on top of it.

The solution is a table of the best action for every grid state from the job's time left down to 0; the
policy reads it every tick (the nearest time step and the nearest slack step, ``slack_nearest``) and solves
again only when the set's history has changed (a run ended) and ``RESOLVE_H`` hours of the job have passed
since the last solve. A spot instance live past its overhead is kept (Exploitation, as UP and orch do); a new
one goes to the launchable zone with the largest expected saving, as orch's zone choice. The solve itself and
its table (``solve``, ``Plan``) are mdp_solve.py's.
"""

from __future__ import annotations

import math

from orchestrator.policy.mdp_model import UP_PRIOR_H, chain, mean_up, residual_life
from orchestrator.policy.mdp_solve import A_OD, A_SPOT, Plan, solve
from orchestrator.policy.model import ON_DEMAND, WAIT, Action, Mode, Observation, ProblemSpec, ZoneStats, spot
from orchestrator.policy.policies import UniformProgressPolicy, paper_safety_net

_EPS = 1e-9
#: The MDP's time step (hours) when the overhead fits in one; a larger overhead is cut into whole steps.
STEP_H = 0.25
#: Hours of the job between two solves (each after a run of the set ended since the last).
RESOLVE_H = 6.0
#: What an hour of waiting while spot is available is charged in the MDP (on-demand hours): the plan would
#: otherwise wait for hours, with slack to spare, for a run old enough to be a long one; the slack it burns is
#: worth nothing only if the future is as the model says. A hedge against the model's error, the same for
#: every trace (0.03 and 0.3 measured close to it, docs/policy.md).
WAIT_TAX = 0.1


def step_for(overhead_h: float) -> float:
    """The grid step: ``STEP_H``, or the overhead cut into the fewest whole steps no longer than it."""
    if overhead_h <= STEP_H:
        return STEP_H
    return overhead_h / math.ceil(overhead_h / STEP_H - _EPS)


class MdpPolicy:
    """See the module docstring. Per-job state: the current plan and when it was solved."""

    name = "orch-mdp"
    # A spot instance past its overhead is kept (the Safety Net keeps it too) unless a notice says it goes:
    # the simulator need not ask then (base.py). ``decide`` keeps no state on those ticks.
    keeps_paid_spot_unnoticed = True

    def __init__(self, wait_tax: tuple[float, float] = (WAIT_TAX, 0.0), slack_nearest: bool = True) -> None:
        self.wait_tax = wait_tax
        # The plan's slack read at the nearest grid step, not rounded down (v3.5, docs/policy.md): rounding down
        # showed the plan up to a step (15 min) less slack than the job had, a bias toward on-demand; the
        # Safety Net is the policy's own check (``paper_safety_net``), so the deadline does not rest on it.
        self.slack_nearest = slack_nearest
        self._plan: Plan | None = None
        self._solved_at = -math.inf
        self._solved_runs = -1
        self._fallback = UniformProgressPolicy()

    def reset(self, spec: ProblemSpec, zones: int) -> None:
        self._plan = None
        self._solved_at = -math.inf
        self._solved_runs = -1

    def _set_stats(self, obs: Observation) -> ZoneStats | None:
        if obs.any_zone is not None:
            return obs.any_zone
        return obs.history[0] if len(obs.history) == 1 else None

    def _hop(self, obs: Observation, stats: ZoneStats, step_h: float) -> float:
        """Per step, the odds that a spot instance's zone ends while the set keeps spot (zone sets only)."""
        if len(obs.history) < 2:
            return 0.0
        zone_up = sum(mean_up(h) for h in obs.history) / len(obs.history)
        rate = max(0.0, 1.0 / zone_up - 1.0 / mean_up(stats))
        return 1.0 - math.exp(-rate * step_h)

    def plan(self, obs: Observation, stats: ZoneStats) -> Plan:
        """The current plan, solved again when the set's history changed and ``RESOLVE_H`` hours passed."""
        changed = stats.runs_recorded != self._solved_runs
        if self._plan is None or (changed and obs.elapsed_h - self._solved_at >= RESOLVE_H - _EPS):
            spec = obs.spec
            step = step_for(spec.overhead_h)
            k = min(obs.spot_prices) if obs.spot_prices else spec.spot_price
            self._plan = solve(
                chain(stats, step),
                step,
                spec.overhead_h,
                k,
                obs.time_left_h,
                obs.slack_h,
                obs.gap_h,
                self._hop(obs, stats, step),
                self.wait_tax,
            )
            self._solved_at, self._solved_runs = obs.elapsed_h, stats.runs_recorded
        return self._plan

    def best_zone(self, obs: Observation, zones: list[int]) -> int:
        """The zone with the largest expected saving (1 - k)(min(life, r) - d) - k d; the longest-lived on a
        tie. life: this tick and the expected rest of the zone's current run."""
        d, r = obs.spec.overhead_h, obs.remaining_h
        best, best_key = zones[0], (-math.inf, -math.inf)
        for z in zones:
            stats = obs.history[z] if obs.history else None
            life = (
                math.inf
                if stats is None
                else obs.gap_h + residual_life(stats.up_runs, stats.streak_h if stats.available else 0.0, UP_PRIOR_H)
            )
            k = obs.spot_prices[z]
            key = (round((1 - k) * (min(life, r) - d) - k * d, 9), life)
            if key > best_key:
                best, best_key = z, key
        return best

    def decide(self, obs: Observation) -> Action:
        if obs.remaining_h <= 0:
            return WAIT
        forced = paper_safety_net(obs)
        if forced is not None:
            return forced
        mode = obs.mode
        if mode is Mode.SPOT:
            assert obs.zone is not None
            stuck = (
                obs.notice and obs.notice[obs.zone] and obs.overhead_left_h >= min(obs.gap_h, obs.time_left_h) - _EPS
            )
            if not stuck:
                return spot(obs.zone)  # Exploitation: a live spot instance is kept
            mode = Mode.IDLE  # it could make no progress before it goes: decide afresh
        stats = self._set_stats(obs)
        if stats is None:
            return self._fallback.decide(obs)
        plan = self.plan(obs, stats)
        zones = obs.launchable()
        if zones:
            age = max(stats.streak_h - obs.gap_h, 0.0) if stats.available else 0.0
            state = plan.chain.state(True, age)
        else:
            age = max(stats.streak_h - obs.gap_h, 0.0) if not stats.available else 0.0
            state = plan.chain.state(False, age)
        act = plan.action(
            obs.time_left_h, obs.slack_h, state, plan.mode_index(mode, obs.overhead_left_h), self.slack_nearest
        )
        if act == A_SPOT and zones:
            return spot(self.best_zone(obs, zones))
        if act == A_OD:
            return ON_DEMAND
        return WAIT
