"""What the config file's section models share: the base model, the value checks, and the one reading of a
section that turns pydantic's first error into a ConfigError at its line.

Every error reads ``<config file>:<line>: <section>.<key>: <what is wrong>`` (a ``ConfigError``), so a user
finds the line to fix. Used by the ``alerts:``, ``budgets:`` and ``catalog:`` sections; no YAML here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from orchestrator.config.errors import ConfigLines, KeyPath, first_problem, unknown_key
from orchestrator.inputs.yaml_words import yaml_kind

M = TypeVar("M", bound=BaseModel)


def refusal(what: str, *at: str | int) -> PydanticCustomError:
    """A model validator's refusal about its key ``at`` (nothing: the mapping itself), for ``first_problem``."""
    return PydanticCustomError("config", what.replace("{", "{{").replace("}", "}}"), {"at": at})


class Section(BaseModel):
    """A mapping of the config file: only its fields' keys, each refused at its own line, and ``must be a
    mapping`` for anything else."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise refusal(f"must be a mapping, got {yaml_kind(data)}")
        unknown = sorted(str(k) for k in data if k not in cls.model_fields)
        if unknown:
            raise refusal(unknown_key(unknown[0], cls.model_fields), unknown[0])
        return data


def read_section(
    model: type[M], raw: object, lines: ConfigLines, at: KeyPath, shown: Callable[[KeyPath], KeyPath] | None = None
) -> M:
    """``raw`` (the value at ``at``) as ``model``; a ConfigError at the line of the first bad value, its key
    path as ``shown`` writes it (default: as it is)."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        where, what, _ = first_problem(exc)
        full = (*at, *where)
        raise lines.error(full, what, shown(full) if shown else None) from None


def listed(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"must be a list, got {yaml_kind(value)}")
    return value


def text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value.strip()


def positive(value: object) -> float:
    """A finite number > 0 (``"$2,000"`` and ``2000`` alike)."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number, got {value!r}")
    raw = value.replace("$", "").replace(",", "").strip() if isinstance(value, str) else value
    try:
        number = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"must be a number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"must be a finite number > 0, got {value!r}")
    return number


def flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {value!r}")
    return value


def whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a whole number >= 1, got {value!r}")
    return value


def named(at: KeyPath, depth: int, items: object, valid: Callable[[str], bool]) -> KeyPath:
    """``at`` with the list index at ``depth`` replaced by that item's name where it has a ``valid`` one
    (``budgets[0].monthly_usd`` → ``budgets.team-a.monthly_usd``); a fault in the name itself keeps the index."""
    if (
        len(at) <= depth
        or not isinstance(at[depth], int)
        or at[depth + 1 : depth + 2] == ("name",)
        or not isinstance(items, list)
        or not 0 <= at[depth] < len(items)
    ):
        return at
    item = items[at[depth]]
    name = item.get("name") if isinstance(item, Mapping) else None
    if not isinstance(name, str) or not valid(name.strip()):
        return at
    return (*at[:depth], name.strip(), *at[depth + 1 :])
