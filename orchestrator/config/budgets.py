"""Reading the ``budgets:`` section of orch's config into ``orchestrator.money.budgets.Budget`` values.

Every error names the key: ``config.yaml: budgets.<name>.<key>: <what>`` (``budgets[<i>]`` before a name
is known). The section's shape is documented in orchestrator/money/budgets.py and docs/configuration.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from orchestrator.config.values import Where, flag, mapping, positive, sequence, text
from orchestrator.money.budgets import DEFAULT_ALERT_AT, Budget, BudgetMatch

_BUDGET_KEYS = frozenset({"name", "match", "monthly_usd", "max_usd_per_hour", "alert_at", "stop_spot_at_cap"})
_MATCH_KEYS = frozenset({"project", "owner"})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
PROJECT_PATTERN = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"     # the manifest's project: (a DNS label, like names)
_PROJECT = re.compile(PROJECT_PATTERN)
_OWNER = re.compile(r"^[a-z][a-z0-9-]{0,30}$")                 # providers.base.validate_owner's rule


def parse_budgets(raw: object, path: str) -> tuple[Budget, ...]:
    """The ``budgets:`` section (a list, or absent/None) as Budgets; ConfigError names the bad key."""
    if raw is None:
        return ()
    where = Where(path, "budgets")
    budgets: list[Budget] = []
    for i, item in enumerate(sequence(raw, where)):
        budget = _parse_budget(item, where.child(i))
        if any(b.name == budget.name for b in budgets):
            raise where.child(budget.name).error("two budgets have this name")
        budgets.append(budget)
    return tuple(budgets)


def _parse_budget(item: object, at: Where) -> Budget:
    section = mapping(item, at, _BUDGET_KEYS)
    if "name" not in section:
        raise at.error("needs a name")
    name = text(section["name"], at.child("name"))
    if not _NAME.match(name):
        raise at.child("name").error(f"{name!r}: letters, digits, '-', '_' or '.' (at most 63)")
    where = Where(at.path, f"budgets.{name}")
    monthly = positive(section["monthly_usd"], where.child("monthly_usd")) if "monthly_usd" in section else None
    hourly = (positive(section["max_usd_per_hour"], where.child("max_usd_per_hour"))
              if "max_usd_per_hour" in section else None)
    if monthly is None and hourly is None:
        raise where.error("give monthly_usd, max_usd_per_hour or both")
    stop_spot = flag(section["stop_spot_at_cap"], where.child("stop_spot_at_cap")) \
        if "stop_spot_at_cap" in section else False
    if monthly is None and (stop_spot or "alert_at" in section):
        key = "alert_at" if "alert_at" in section else "stop_spot_at_cap"
        raise where.child(key).error("needs monthly_usd (it is about the monthly cap)")
    alert_at = _alert_at(section["alert_at"], where.child("alert_at")) if "alert_at" in section \
        else (DEFAULT_ALERT_AT if monthly is not None else ())
    match = _match(section.get("match"), where.child("match"))
    return Budget(name, match, monthly, hourly, alert_at, stop_spot)


def _alert_at(raw: object, where: Where) -> tuple[float, ...]:
    fractions: set[float] = set()
    for i, value in enumerate(sequence(raw, where)):
        fraction = positive(value, where.child(i))
        if fraction > 1:
            raise where.child(i).error(f"{value!r} is a fraction of monthly_usd: more than 0, at most 1")
        fractions.add(round(fraction, 4))
    return tuple(sorted(fractions))


def _match(raw: object, where: Where) -> BudgetMatch:
    if raw is None:
        return BudgetMatch()
    section = mapping(raw, where, _MATCH_KEYS)
    return BudgetMatch(_names(section, "project", where, _PROJECT, "a project name (lower-case letters, digits, '-')"),
                       _names(section, "owner", where, _OWNER, "an orch owner (lower-case letters, digits, '-', "
                              "starting with a letter, at most 31)"))


def _names(section: Mapping[str, object], key: str, where: Where, pattern: re.Pattern[str],
           what: str) -> frozenset[str]:
    """``match.<key>``: one name or a list of them (absent: no condition)."""
    if key not in section:
        return frozenset()
    value = section[key]
    items = value if isinstance(value, list) else [value]
    names: set[str] = set()
    for i, item in enumerate(items):
        at = where.child(key) if not isinstance(value, list) else where.child(key).child(i)
        name = text(item, at)
        if not pattern.match(name):
            raise at.error(f"{name!r} is not {what}")
        names.add(name)
    if not names:
        raise where.child(key).error("an empty list matches no job; leave match out for every job")
    return frozenset(names)
