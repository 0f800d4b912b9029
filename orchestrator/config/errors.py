"""The one error of orch's config: a bad file, section or key, its message naming the key to fix.

Its own module so that the section readers (orchestrator/config/values.py, the ``alerts:`` and ``budgets:``
sections) raise it without importing the config file's reader, which imports them: no import cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class ConfigError(ValueError):
    """``<config file>: <section>.<key>: <what is wrong>``, or a file orch cannot read."""


def refuse_unknown_keys(section: Mapping[str, object], known: Iterable[str], where: str) -> None:
    """ConfigError ``<where>.<first unknown key>: unknown key (known: …)`` when ``section`` names a key not in
    ``known`` (``where``: the file's path and the section, e.g. ``orch.yaml: catalog``)."""
    names = sorted(known)
    unknown = sorted(set(section) - set(names))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(names)})")


def first_problem(exc: ValidationError) -> tuple[str, str, object]:
    """A section model's first validation error as (its key, what is wrong, the value given): the one a
    ConfigError names (pydantic's own "Value error, " prefix dropped)."""
    first = exc.errors()[0]
    key = str(first["loc"][0]) if first["loc"] else "?"
    return key, str(first.get("msg", "invalid")).removeprefix("Value error, "), first.get("input")
