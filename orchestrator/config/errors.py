"""The one error of orch's config: a bad file, section or key, its message naming the line and the key to fix.

Its own module so that the section readers (orchestrator/config/values.py, the ``alerts:``, ``budgets:``,
``catalog:`` and ``daemon:`` sections) raise it without importing the config file's reader, which imports them:
no import cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

#: A place in the config file: its keys and list indexes from the top (``("budgets", 0, "monthly_usd")``).
KeyPath = tuple[str | int, ...]


class ConfigError(ValueError):
    """``<config file>:<line>: <section>.<key>: <what is wrong> (<hint>)``, or a file orch cannot read."""


@dataclass(frozen=True, slots=True)
class ConfigLines:
    """The config file and the line each of its keys (else its value) is written on, as the YAML 1.2 reader
    found them; ``file`` None: a config that came from no file (defaults, tests)."""

    file: Path | str | None = None
    lines: Mapping[KeyPath, int] = field(default_factory=lambda: MappingProxyType({}))

    def line(self, at: KeyPath) -> int | None:
        """The line of ``at``, or of its nearest written ancestor (a value that came through an alias or a
        merge key has no place of its own)."""
        for n in range(len(at), 0, -1):
            if at[:n] in self.lines:
                return self.lines[at[:n]]
        return None

    def where(self, at: KeyPath, shown: KeyPath | None = None) -> str:
        """``<file>:<line>: <key path>`` (``<file>: …`` without a line, the key path alone without a file);
        ``shown``: the key path as the message names it (a budget by its name rather than its index)."""
        field_ = dotted(shown if shown is not None else at)
        if self.file is None:
            return field_
        line = self.line(at)
        return f"{self.file}:{line}: {field_}" if line is not None else f"{self.file}: {field_}"

    def renamed(self, old: KeyPath, new: KeyPath) -> ConfigLines:
        """These lines with what is written under ``old`` also found under ``new`` (a section read by another
        name than the file's)."""
        more = {(*new, *at[len(old) :]): line for at, line in self.lines.items() if at[: len(old)] == old}
        return ConfigLines(self.file, MappingProxyType({**self.lines, **more}))

    def error(self, at: KeyPath, what: str, shown: KeyPath | None = None) -> ConfigError:
        return ConfigError(f"{self.where(at, shown)}: {what}")


def dotted(at: KeyPath) -> str:
    """``budgets[0].match.owner``: keys joined by dots, list indexes in brackets."""
    text = ""
    for part in at:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


#: Longer unknown keys get no did-you-mean: comparing a megabyte-long key costs more than a typo is worth.
MAX_SUGGEST_LEN = 64


def unknown_key(key: str, known: Iterable[str]) -> str:
    """What every section of the config says of a key it does not know: ``unknown key (did you mean
    'regions'?)`` where a known key is close, else ``unknown key (known: a, b, …)``."""
    import difflib

    names = sorted(known)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6) if len(key) <= MAX_SUGGEST_LEN else []
    if close:
        return f"unknown key (did you mean {close[0]!r}?)"
    return f"unknown key (known: {', '.join(names)})" if names else "unknown key"


def refuse_unknown_keys(section: Mapping[str, object], known: Iterable[str], lines: ConfigLines, at: KeyPath) -> None:
    """ConfigError ``<file>:<line>: <at>.<first unknown key>: unknown key (…)`` (:func:`unknown_key`) when
    ``section`` (the mapping at ``at``) names a key not in ``known``."""
    names = sorted(known)
    unknown = sorted(str(k) for k in set(section) - set(names))
    if unknown:
        raise lines.error((*at, unknown[0]), unknown_key(unknown[0], names))


def first_problem(exc: ValidationError) -> tuple[KeyPath, str, object]:
    """A section model's first validation error as (where, what is wrong, the value given): the one a
    ConfigError names (pydantic's own "Value error, " prefix dropped). A refusal of a model's own
    validators names the key it is about in its context (``at``, see orchestrator/config/values.py)."""
    first = exc.errors()[0]
    at: KeyPath = tuple(p for p in first["loc"] if isinstance(p, str | int))
    at += tuple((first.get("ctx") or {}).get("at", ()))
    return at, str(first.get("msg", "invalid")).removeprefix("Value error, "), first.get("input")
