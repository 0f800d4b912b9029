"""Reading one section of orch's config file into typed values, with errors that name the key.

Every error reads ``<config file>: <section>.<key>: <what is wrong>`` (a ``ConfigError``), so a user
finds the line to fix. Used by the ``budgets:`` and ``alerts:`` sections; pure Python, no YAML here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

from orchestrator.config.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Where:
    """A position in the config file: the file and a dotted key path (``budgets.team-a.monthly_usd``)."""

    path: str
    key: str

    def child(self, name: str | int) -> Where:
        return Where(self.path, f"{self.key}[{name}]" if isinstance(name, int) else f"{self.key}.{name}")

    def error(self, what: str) -> ConfigError:
        return ConfigError(f"{self.path}: {self.key}: {what}")


def mapping(value: object, where: Where, known: Set[str]) -> Mapping[str, Any]:
    """``value`` as a mapping whose keys are all in ``known``."""
    if not isinstance(value, Mapping):
        raise where.error(f"must be a mapping, got {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise where.child(unknown[0]).error(f"unknown key (known: {', '.join(sorted(known))})")
    return value


def sequence(value: object, where: Where) -> list[Any]:
    if not isinstance(value, list):
        raise where.error(f"must be a list, got {type(value).__name__}")
    return value


def text(value: object, where: Where) -> str:
    if not isinstance(value, str) or not value.strip():
        raise where.error("must be a non-empty string")
    return value.strip()


def positive(value: object, where: Where) -> float:
    """A finite number > 0 (``"$2,000"`` and ``2000`` alike)."""
    if isinstance(value, bool):
        raise where.error(f"must be a number, got {value!r}")
    raw = value.replace("$", "").replace(",", "").strip() if isinstance(value, str) else value
    try:
        number = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise where.error(f"must be a number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise where.error(f"must be a finite number > 0, got {value!r}")
    return number


def flag(value: object, where: Where) -> bool:
    if not isinstance(value, bool):
        raise where.error(f"must be true or false, got {value!r}")
    return value


def whole(value: object, where: Where, *, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise where.error(f"must be a whole number >= {least}, got {value!r}")
    return value
