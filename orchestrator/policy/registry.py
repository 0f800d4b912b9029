"""Policy names, as the CLI and the daemon's configuration spell them; a user's own policies too.

A user's policy comes from either
- a Python file (``orch simulate --policy-file my_policy.py``) that defines ``POLICY``: a class or zero-argument
  callable returning an object with ``name``, ``reset(spec, zones)`` and ``decide(obs)`` (``SpotPolicy``); or
- an installed package's entry point in the group ``orch.policies`` (``name = "pkg.module:Factory"``), found
  by its name like the built-in ones.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from orchestrator.policy.base import SpotPolicy, new_planner
from orchestrator.policy.hybrid import HybridPolicy
from orchestrator.policy.orch_v1 import OrchV1Policy
from orchestrator.policy.policies import GreedyPolicy, OnDemandPolicy, UniformProgressPolicy


def _rules_policy() -> SpotPolicy:
    """orch-rules: orch's rules on single zones too (orch with its ``mdp_singles`` switch off), by its own name."""
    policy = HybridPolicy(mdp_singles=False)
    policy.name = "orch-rules"
    return policy


#: The entry-point group a package registers its policies in.
ENTRY_POINT_GROUP = "orch.policies"

_FACTORIES: dict[str, Callable[[], SpotPolicy]] = {
    "on-demand": OnDemandPolicy,
    "greedy": GreedyPolicy,
    "uniform-progress": UniformProgressPolicy,
    "orch-v1": OrchV1Policy,
    "orch": HybridPolicy,
    "orch-rules": _rules_policy,
    "orch-mdp": new_planner,
}
#: Policies loaded from files in this process, by name.
_FROM_FILES: dict[str, Callable[[], SpotPolicy]] = {}

#: The policies a table lists by default, in its order (orch-v1, the previous orch, only when asked for).
POLICY_NAMES: tuple[str, ...] = ("on-demand", "greedy", "uniform-progress", "orch")


class UnknownPolicyError(ValueError):
    pass


class PolicyFileError(ValueError):
    """A policy file that cannot be loaded or does not define a usable POLICY; the message names the file."""


def _check(policy: object, where: str) -> SpotPolicy:
    name = getattr(policy, "name", None)
    if (
        not isinstance(name, str)
        or not name
        or not callable(getattr(policy, "reset", None))
        or not callable(getattr(policy, "decide", None))
    ):
        raise PolicyFileError(
            f"{where}: POLICY() must return an object with a non-empty str `name`, "
            "`reset(spec, zones)` and `decide(obs)`"
        )
    return policy  # type: ignore[return-value]


def load_policy_file(path: Path) -> str:
    """Import ``path``, register its ``POLICY`` under the name its policies carry; return that name.

    The file runs as Python: only load files you trust (as with any script you run).
    """
    where = str(path)
    if not path.is_file():
        raise PolicyFileError(f"{where}: no such policy file")
    module_name = f"orch_policy_file_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PolicyFileError(f"{where}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a user's file may fail in any way: bad input
        raise PolicyFileError(f"{where}: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, "POLICY", None)
    if not callable(factory):
        raise PolicyFileError(f"{where}: defines no POLICY (a SpotPolicy class or a factory returning one)")
    try:
        name = _check(factory(), where).name
    except PolicyFileError:
        raise
    except Exception as exc:  # the same, from its POLICY()
        raise PolicyFileError(f"{where}: POLICY() failed: {type(exc).__name__}: {exc}") from None
    if name.lower() in _FACTORIES:
        raise PolicyFileError(f"{where}: its policy is named {name!r}, a built-in policy's name")
    _FROM_FILES[name.lower()] = factory
    return name


def _entry_point(key: str) -> Callable[[], SpotPolicy] | None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name.lower() == key:
            return ep.load()  # type: ignore[no-any-return]
    return None


def make_policy(name: str) -> SpotPolicy:
    """A fresh policy object for ``name`` (also accepts 'up' for uniform-progress): a built-in, one loaded
    from a file in this process, or an ``orch.policies`` entry point."""
    key = {"up": "uniform-progress", "od": "on-demand"}.get(name.lower(), name.lower())
    factory = _FACTORIES.get(key) or _FROM_FILES.get(key) or _entry_point(key)
    if factory is None:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; choose from {', '.join(_FACTORIES)} (or a "
            f"--policy-file, or a package's {ENTRY_POINT_GROUP} entry point)"
        )
    return factory()
