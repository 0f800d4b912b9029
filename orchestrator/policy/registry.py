"""Policy names, as the CLI and the daemon's configuration spell them."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.policy.base import SpotPolicy
from orchestrator.policy.orch import OrchPolicy
from orchestrator.policy.orch_v1 import OrchV1Policy
from orchestrator.policy.policies import GreedyPolicy, OnDemandPolicy, UniformProgressPolicy

_FACTORIES: dict[str, Callable[[], SpotPolicy]] = {
    "on-demand": OnDemandPolicy,
    "greedy": GreedyPolicy,
    "uniform-progress": UniformProgressPolicy,
    "orch-v1": OrchV1Policy,
    "orch": OrchPolicy,
}

#: The policies a table lists by default, in its order (orch-v1, the previous orch, only when asked for).
POLICY_NAMES: tuple[str, ...] = ("on-demand", "greedy", "uniform-progress", "orch")


class UnknownPolicyError(ValueError):
    pass


def make_policy(name: str) -> SpotPolicy:
    """A fresh policy object for ``name`` (also accepts 'up' for uniform-progress)."""
    key = {"up": "uniform-progress", "od": "on-demand"}.get(name.lower(), name.lower())
    if key not in _FACTORIES:
        raise UnknownPolicyError(f"unknown policy {name!r}; choose from {', '.join(_FACTORIES)}")
    return _FACTORIES[key]()
