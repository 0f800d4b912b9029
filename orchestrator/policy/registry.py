"""Policy names, as the CLI and the daemon's configuration spell them."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.policy.base import SpotPolicy
from orchestrator.policy.orch import OrchPolicy
from orchestrator.policy.policies import GreedyPolicy, OnDemandPolicy, UniformProgressPolicy

_FACTORIES: dict[str, Callable[[], SpotPolicy]] = {
    "on-demand": OnDemandPolicy,
    "greedy": GreedyPolicy,
    "uniform-progress": UniformProgressPolicy,
    "orch": OrchPolicy,
}

#: Every policy name, in the order tables list them.
POLICY_NAMES: tuple[str, ...] = tuple(_FACTORIES)


class UnknownPolicyError(ValueError):
    pass


def make_policy(name: str) -> SpotPolicy:
    """A fresh policy object for ``name`` (also accepts 'up' for uniform-progress)."""
    key = {"up": "uniform-progress", "od": "on-demand"}.get(name.lower(), name.lower())
    if key not in _FACTORIES:
        raise UnknownPolicyError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
    return _FACTORIES[key]()
