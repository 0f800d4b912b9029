"""The plan orch hands a zone set at a large overhead (orch.py, ``set_plan``): orch-mdp, with orch's zone choice.

orch-mdp decides when to run spot, on-demand or wait; where a new spot instance goes is asked of ``choose``
(orch gives its own zone choice on the cautious lifetime: the lower of the estimate over every run kept and
over the zone's last runs, so a zone flapping lately is not launched into on the strength of its longer past,
docs/policy.md, v3.2). Imported only for the jobs it plans (orch-mdp needs numpy).
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.policy.mdp import MdpPolicy
from orchestrator.policy.model import Observation


class SetPlanner(MdpPolicy):
    """orch-mdp whose new spot instance goes to ``choose(obs)`` (a launchable zone; None: orch-mdp's own)."""

    def __init__(self, choose: Callable[[Observation], int | None] | None = None) -> None:
        super().__init__()
        self.choose = choose

    def best_zone(self, obs: Observation, zones: list[int]) -> int:
        picked = self.choose(obs) if self.choose is not None else None
        return picked if picked is not None and picked in zones else super().best_zone(obs, zones)
