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
    """

    name: str

    def reset(self, spec: ProblemSpec, zones: int) -> None: ...

    def decide(self, obs: Observation) -> Action: ...
