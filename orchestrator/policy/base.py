"""The one interface every spot policy implements; the simulator and the daemon's recovery both call it."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from orchestrator.policy.model import Action, Observation, ProblemSpec


@runtime_checkable
class SpotPolicy(Protocol):
    """Decides, at each tick of one job, whether to wait, run on-demand or run spot in a zone.

    Contract:
    - ``reset(spec, zones)`` is called once before a job's first ``decide``; a policy keeps per-job state
      only between ``reset`` and the job's end.
    - ``decide(obs)`` is called at every tick (the daemon calls it whenever something changed: a preemption,
      a capacity error, a deadline check). It may return SPOT(z) only for a zone with ``obs.available[z]``.
      Returning the action of the instance the job is on keeps that instance; anything else replaces it.
    - A policy must never look at anything but what it is given: no trace, no clock.
    - Optional: a class attribute ``needs_history = False`` says the policy never reads ``obs.history`` or
      ``obs.any_zone``; the simulator then shows it ``()`` and None and saves keeping them. It is read from the
      policy's own class only (a subclass is shown the history unless it says the same).
    - Optional promises, read the same way (own class only), that let the simulator skip asking: a class
      attribute ``keeps_paid_spot = True`` says that on a spot instance whose overhead is paid
      (``overhead_left_h == 0``) and that was not preempted, ``decide`` returns that instance, whatever else
      the observation says; ``keeps_paid_spot_unnoticed = True``, the same except when ``obs.notice`` says that
      instance's zone loses spot next tick (those ticks are asked); ``keeps_on_demand = True``, that on
      on-demand with work left it returns ON_DEMAND.
      Only a policy whose ``decide`` keeps no state across ticks may promise either: it is not called then.
    """

    name: str

    def reset(self, spec: ProblemSpec, zones: int) -> None: ...

    def decide(self, obs: Observation) -> Action: ...


def new_planner() -> SpotPolicy:
    """A new orch-mdp (``orchestrator/policy/mdp.py``), imported on first use: it needs numpy, which neither the
    CLI's start nor a job that no plan decides should pay for. orch's dispatches and the registry all make it so."""
    from orchestrator.policy.mdp import MdpPolicy

    return MdpPolicy()
