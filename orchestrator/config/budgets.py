"""The ``budgets:`` section of orch's config: pydantic models read into ``orchestrator.money.budgets.Budget`` values.

Every error names the line and the key: ``config.yaml:4: budgets.<name>.<key>: <what>`` (``budgets[<i>]`` before
a name is known). The section's shape is documented in orchestrator/money/budgets.py and docs/configuration.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, RootModel, model_validator

from orchestrator.config.errors import ConfigLines, KeyPath
from orchestrator.config.values import Section, flag, listed, named, positive, read_section, refusal, text
from orchestrator.inputs.yaml_words import yaml_kind
from orchestrator.money.budgets import DEFAULT_ALERT_AT, Budget, BudgetMatch, CapStop

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
PROJECT_PATTERN = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"  # the manifest's project: (a DNS label, like names)
_PROJECT = re.compile(PROJECT_PATTERN)
_OWNER = re.compile(r"^[a-z](?:[a-z0-9-]{0,29}[a-z0-9])?$")  # providers.base.validate_owner's rule


def _name(value: object) -> str:
    name = text(value)
    if not _NAME.match(name):
        raise ValueError(f"{name!r}: letters, digits, '-', '_' or '.' (at most 63)")
    return name


def _names(pattern: re.Pattern[str], what: str) -> BeforeValidator:
    """``match.<key>``: one name or a list of them (absent: no condition)."""

    def check(value: object) -> frozenset[str]:
        items = value if isinstance(value, list) else [value]
        names: set[str] = set()
        for i, item in enumerate(items):
            at = (i,) if isinstance(value, list) else ()
            try:
                name = text(item)
            except ValueError as exc:
                raise refusal(str(exc), *at) from None
            if not pattern.match(name):
                raise refusal(f"{name!r} is not {what}", *at)
            names.add(name)
        if not names:
            raise ValueError("an empty list matches no job; leave match out for every job")
        return frozenset(names)

    return BeforeValidator(check)


def _alert_at(value: object) -> tuple[float, ...]:
    fractions: set[float] = set()
    for i, item in enumerate(listed(value)):
        try:
            fraction = positive(item)
        except ValueError as exc:
            raise refusal(str(exc), i) from None
        if fraction > 1:
            raise refusal(f"{item!r} is a fraction of monthly_usd: more than 0, at most 1", i)
        fractions.add(round(fraction, 4))
    return tuple(sorted(fractions))


#: The largest amount a budget takes: a billion dollars (a month or an hour). More is a typo, and as a cap it
#: printed as a number hundreds of digits long across `orch budgets` (1e300 ran its table to 864 columns).
MAX_BUDGET_USD = 1e9


def _money(value: object) -> float:
    amount = positive(value)
    if amount > MAX_BUDGET_USD:
        raise ValueError(f"must be at most {MAX_BUDGET_USD:,.0f} (a billion dollars), got {value!r}")
    return amount


def _cap_stop(value: object) -> CapStop:
    if not isinstance(value, str):      # false (not the word none) or true (which stop?) among them
        raise ValueError(f"must be none, spot or all, got {yaml_kind(value)}")
    word = text(value).lower()
    try:
        return CapStop(word)
    except ValueError:
        raise ValueError(f"{word!r}: choose none, spot or all") from None


Money = Annotated[float | None, BeforeValidator(_money)]
Projects = Annotated[frozenset[str], _names(_PROJECT, "a project name (lower-case letters, digits, '-')")]
Owners = Annotated[
    frozenset[str],
    _names(_OWNER, "an orch owner (lower-case letters, digits, '-', starting with a letter, ending with a letter or "
                    "digit, at most 31)"),
]


class MatchSection(Section):
    project: Projects = frozenset()
    owner: Owners = frozenset()


class BudgetSection(Section):
    """One budget as written; the fields in the order they are checked."""

    name: Annotated[str, BeforeValidator(_name)]
    monthly_usd: Money = None
    max_usd_per_hour: Money = None
    stop_at_cap: Annotated[CapStop | None, BeforeValidator(_cap_stop)] = None
    stop_spot_at_cap: Annotated[bool | None, BeforeValidator(flag)] = None     # the older key: true is spot
    alert_at: Annotated[tuple[float, ...] | None, BeforeValidator(_alert_at)] = None
    match: MatchSection | None = None

    @model_validator(mode="before")
    @classmethod
    def _has_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "name" not in data:
            raise refusal("needs a name")
        return data

    @model_validator(mode="after")
    def _caps(self) -> BudgetSection:
        if self.monthly_usd is None and self.max_usd_per_hour is None:
            raise refusal("give monthly_usd, max_usd_per_hour or both")
        if self.monthly_usd is None:
            about_cap = (("alert_at", self.alert_at is not None),
                         ("stop_at_cap", self.stop_at_cap not in (None, CapStop.NONE)),
                         ("stop_spot_at_cap", bool(self.stop_spot_at_cap)))
            for key, given in about_cap:
                if given:
                    raise refusal("needs monthly_usd (it is about the monthly cap)", key)
        older = None if self.stop_spot_at_cap is None else (CapStop.SPOT if self.stop_spot_at_cap else CapStop.NONE)
        if older is not None and self.stop_at_cap is not None and older is not self.stop_at_cap:
            raise refusal(
                f"{str(self.stop_spot_at_cap).lower()} says stop_at_cap: {older}, but stop_at_cap is "
                f"{self.stop_at_cap} (keep stop_at_cap and drop stop_spot_at_cap, its older form)",
                "stop_spot_at_cap",
            )
        return self

    def cap_stop(self) -> CapStop:
        """``stop_at_cap``, else the older ``stop_spot_at_cap`` (true: spot), else none."""
        if self.stop_at_cap is not None:
            return self.stop_at_cap
        return CapStop.SPOT if self.stop_spot_at_cap else CapStop.NONE

    def budget(self) -> Budget:
        alert_at = self.alert_at if self.alert_at is not None else (DEFAULT_ALERT_AT if self.monthly_usd else ())
        match = BudgetMatch(self.match.project, self.match.owner) if self.match else BudgetMatch()
        return Budget(self.name, match, self.monthly_usd, self.max_usd_per_hour, alert_at, self.cap_stop())


class BudgetsSection(RootModel[Annotated[list[BudgetSection], BeforeValidator(listed)]]):
    """The ``budgets:`` list; two budgets may not share a name."""

    @model_validator(mode="after")
    def _distinct(self) -> BudgetsSection:
        seen: set[str] = set()
        for i, budget in enumerate(self.root):
            if budget.name in seen:
                raise refusal("two budgets have this name", i)
            seen.add(budget.name)
        return self


def parse_budgets(raw: object, lines: ConfigLines) -> tuple[Budget, ...]:
    """The ``budgets:`` section (a list, or absent/None) as Budgets; a ConfigError names the line and the key."""
    if raw is None:
        return ()

    def shown(at: KeyPath) -> KeyPath:
        return named(at, 1, raw, lambda name: bool(_NAME.match(name)))

    return tuple(b.budget() for b in read_section(BudgetsSection, raw, lines, ("budgets",), shown).root)
