"""orch (v3.3): the MDP's plan for a single zone, orch's rules for a zone set; one dispatch, chosen per job.

Measured side by side (docs/policy-mdp.md, docs/policy.md v3.3), orch-mdp's plan closes more of Uniform
Progress's gap to the optimum than orch's rules on single zones (held in and held out alike), and less in zone
sets, where its one chain for "some zone has spot" with a mean hop rate is cruder than orch's zone-level
rules. So the job's zone count picks the decider at ``reset``: one zone -> ``MdpPolicy`` (``mdp_singles``),
else ``OrchPolicy`` (whose own ``set_plan`` hands a zone set at a large overhead to the MDP as well). Both
keep Uniform Progress's Safety Net, so the deadline guarantee is unchanged.

Before either decides, a job on on-demand whose work left costs no more there than spot could cost even never
preempted stays on on-demand to its end (``finish_on_demand``, orch's rule from on-demand, ``finishes_on_demand``):
the MDP's grid bills whole 15-minute steps, so with less than a step of work left it rounds the on-demand
finish up and may leave on-demand for a spot session or a wait that costs more (docs/policy.md, v3.4).

``mdp_singles=False`` puts single zones back on orch's rules (``orch-rules`` in the registry): the switch the issue asks
every rule to have. The MDP and numpy are imported on a single zone's first job only (the CLI's start does
not pay for them).
"""

from __future__ import annotations

from orchestrator.policy.base import SpotPolicy, new_planner
from orchestrator.policy.model import ON_DEMAND, Action, Observation, ProblemSpec
from orchestrator.policy.orch import OrchPolicy, finishes_on_demand


class HybridPolicy:
    """See the module docstring. ``rules``: the zone sets' decider (orch's rules, their switches its own).
    ``finish_on_demand``: the switch of the on-demand finish kept ahead of either decider (module docstring)."""

    name = "orch"
    # Both deciders keep a spot instance past its overhead unless a notice says it goes (their own
    # declarations; ``rules`` is an OrchPolicy), and the on-demand finish acts only on on-demand: the simulator
    # need not ask then (base.py).
    keeps_paid_spot_unnoticed = True

    def __init__(
        self, *, mdp_singles: bool = True, rules: OrchPolicy | None = None, finish_on_demand: bool = True
    ) -> None:
        self.mdp_singles = mdp_singles
        self.finish_on_demand = finish_on_demand
        self._rules = rules if rules is not None else OrchPolicy()
        self._mdp: SpotPolicy | None = None
        self._active: SpotPolicy = self._rules

    def _mdp_policy(self) -> SpotPolicy:
        if self._mdp is None:
            self._mdp = new_planner()
        return self._mdp

    def reset(self, spec: ProblemSpec, zones: int) -> None:
        self._active = self._mdp_policy() if self.mdp_singles and zones == 1 else self._rules
        self._active.reset(spec, zones)

    def decide(self, obs: Observation) -> Action:
        if self.finish_on_demand and finishes_on_demand(obs):
            return ON_DEMAND
        return self._active.decide(obs)
