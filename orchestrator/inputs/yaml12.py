"""YAML 1.2 core-schema scalars, refusing the plain scalars YAML 1.1 reads otherwise (with a hint).

Plain scalars: ``true``/``false``, ``null``/``~``/empty, decimal and ``0x`` integers, floats (``.inf`` and
``.nan`` included: the schema refuses them where a number is expected). Refused as ambiguous: ``yes``/
``no``/``on``/``off`` (1.1 booleans), ``010`` (1.1 octal), ``0o10`` (1.1 text), ``0b1``, base-60 ``1:30``,
``1_000``, signed hex. Timestamps are not a 1.2 type: they stay text. Explicit tags: the core ones only.
Numbers keep their text (``YamlInt.source``), so configuration passed on as text keeps its spelling.
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class YamlInputError(Exception):
    """A problem at a position (1-based line and column; None where the file has no position)."""

    def __init__(self, message: str, line: int | None = None, col: int | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.col = col
        self.hint = hint


class YamlInt(int):
    """An integer as written in YAML; ``source`` is its text ("0x1F")."""

    source: str

    def __new__(cls, value: int, source: str) -> YamlInt:
        obj = super().__new__(cls, value)
        obj.source = source
        return obj


class YamlFloat(float):
    """A float as written in YAML; ``source`` is its text ("1e-4", "1.10")."""

    source: str

    def __new__(cls, value: float, source: str) -> YamlFloat:
        obj = super().__new__(cls, value)
        obj.source = source
        return obj


# -- resolving scalars (YAML 1.2 core schema) ----------------------------------------------------------

_NULL = re.compile(r"~|null|Null|NULL|")
_TRUE = re.compile(r"true|True|TRUE")
_FALSE = re.compile(r"false|False|FALSE")
_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_INF = re.compile(r"[-+]?\.(?:inf|Inf|INF)")
_NAN = re.compile(r"\.(?:nan|NaN|NAN)")
# Plain scalars that YAML 1.1 and 1.2 read differently: (pattern, 1.1's reading, 1.2's reading, the fix).
_AMBIGUOUS: tuple[tuple[re.Pattern[str], str, str, str], ...] = (
    (re.compile(r"yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF"), "a boolean", "text",
     "write true or false, or quote it ('{v}') to mean the text"),
    (re.compile(r"[-+]?0[0-7_]+"), "an octal number", "a decimal number",
     "write the number without leading zeros, or quote it ('{v}') to mean the text"),
    # 1.1's octal has no 8 or 9: 099720109477 (an AWS account id, as a YAML 1.1 dumper leaves it) is 1.1 text.
    (re.compile(r"[-+]?0[0-9_]*[89][0-9_]*"), "text", "a decimal number (its leading zero lost)",
     "quote it ('{v}') to mean the text"),
    (re.compile(r"[-+]?0o[0-7_]+"), "text", "an octal number", "write it in decimal, or quote it ('{v}')"),
    (re.compile(r"[-+]?0b[01_]+"), "a binary number", "text", "write it in decimal, or quote it ('{v}')"),
    (re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?"), "a base-60 number", "text",
     "quote it ('{v}'); for a duration write e.g. 1m30s"),
    (re.compile(r"[-+]?(?:[0-9][0-9_]*_[0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?"), "a number", "text",
     "write it without '_', or quote it ('{v}')"),
    (re.compile(r"[-+]0x[0-9a-fA-F_]+|0x[0-9a-fA-F]*_[0-9a-fA-F_]*"), "a number", "text",
     "write it in decimal, or quote it ('{v}')"),
)

CORE_TAG = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{CORE_TAG}{t}" for t in ("str", "int", "float", "bool", "null")}


#: The first characters of every pattern above: a plain scalar starting otherwise ("gpu", "A100") is text.
_SPECIAL_START = frozenset("~nNtTfFyYoO-+.0123456789")


def _plain_scalar(value: str) -> Any:
    """A plain (unquoted, untagged) scalar by YAML 1.2's core schema; YamlInputError if 1.1 reads it otherwise."""
    if value and value[0] not in _SPECIAL_START:
        return value
    if _NULL.fullmatch(value):
        return None
    if _TRUE.fullmatch(value):
        return True
    if _FALSE.fullmatch(value):
        return False
    if _INT.fullmatch(value):
        return YamlInt(int(_short_enough(value)), value)
    if _HEX.fullmatch(value):
        return YamlInt(int(_short_enough(value), 16), value)
    for pattern, old, new, fix in _AMBIGUOUS:   # before floats: 1.2 reads 010 as 10, 1.1 as 8
        if pattern.fullmatch(value):
            raise YamlInputError(f"{value[:40]} is ambiguous: YAML 1.1 reads it as {old}, YAML 1.2 as {new}",
                                 hint=fix.format(v=value[:40]))
    if _FLOAT.fullmatch(value):
        return YamlFloat(float(value), value)
    if _INF.fullmatch(value):
        return YamlFloat(float("-inf") if value.startswith("-") else float("inf"), value)
    if _NAN.fullmatch(value):
        return YamlFloat(float("nan"), value)
    return value


#: No number in a manifest needs more digits; Python refuses int() of over 4,300 (a ValueError, not a
#: manifest error) and a long one costs quadratic time to convert.
MAX_INT_DIGITS = 40


def _short_enough(value: str) -> str:
    if len(value) > MAX_INT_DIGITS:
        raise YamlInputError(f"{value[:20]}... is a number of {len(value)} digits: too large (at most "
                             f"{MAX_INT_DIGITS} digits)")
    return value


def _tagged_scalar(tag: str, value: str) -> Any:
    """A scalar with an explicit core tag (``!!int 7``), read by YAML 1.2's rules."""
    kind = tag[len(CORE_TAG):]
    if kind == "str":
        return value
    plain = _plain_scalar(value)
    wanted = {"int": int, "float": float, "bool": bool, "null": type(None)}[kind]
    if kind == "float" and isinstance(plain, int) and not isinstance(plain, bool):
        return YamlFloat(float(plain), value)
    if isinstance(plain, wanted) and not (kind == "int" and isinstance(plain, bool)):
        return plain
    raise YamlInputError(f"{value[:40]!r} is not a YAML 1.2 {kind}")


def scalar(event: yaml.ScalarEvent) -> Any:
    """The value of one scalar event (plain, quoted or tagged)."""
    tag = event.tag
    if tag in (None, "!"):
        plain = event.implicit[0] and not event.style
        return _plain_scalar(event.value) if plain and tag is None else event.value
    if tag in _SCALAR_TAGS:
        return _tagged_scalar(tag, event.value)
    raise YamlInputError(f"YAML tag {tag[:60]} is not allowed in a manifest",
                         hint="write plain values: text, numbers, true/false, lists and mappings")
