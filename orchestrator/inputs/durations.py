"""Durations ("30s", "15m", "2h", "1d", "1h30m") and prices ("$2.50", "2.5", "2.5/h") as manifests write them.

``parse_duration`` is orch's one duration parser: manifests, the config file (``daemon.*_s``,
``catalog.refresh_every``), ``ORCH_*`` variables and CLI flags all read durations through it. A number is
seconds; text needs a unit suffix, except where the value can only be text (an environment variable, a
flag): ``setting_duration`` reads ASCII digits there as seconds first."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from orchestrator.inputs.yaml_words import yaml_kind
from orchestrator.redaction import shown

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_RE = re.compile(r"^(?:\d+(?:\.\d+)?[smhdw])+$")
_PART_RE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
#: A number of seconds as written in ASCII: float() alone also takes other scripts' digits ("١٢٠"),
#: underscores ("1_200") and "nan"/"inf", none of which a setting should mean.
_SECONDS_RE = re.compile(r"[+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_PRICE_RE = re.compile(r"^\$?\s*(\d+(?:\.\d+)?|\.\d+)\s*(?:/\s*(?:h|hr|hour))?$")

DURATION_PATTERN = r"^(\d+(\.\d+)?[smhdw])+$"
PRICE_PATTERN = r"^\$?\s*(\d+(\.\d+)?|\.\d+)\s*(/\s*(h|hr|hour))?$"

DURATION_HINT = "write a duration like 30s, 15m, 2h, 1d or 1h30m"
PRICE_HINT = "write a price in US dollars like 2.5, \"$2.50\" or 2.5/h"


class HintedValueError(ValueError):
    """A validation failure with a fix-it hint; the loader shows the hint in parentheses. ``at``: for a check of
    several fields (a model validator), the field at fault, relative to the model, when it is written."""

    def __init__(self, message: str, hint: str | None = None, at: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.at = at


def parse_duration(value: object) -> timedelta:
    """A non-negative duration: a timedelta, a number of seconds, or text such as "1h30m"."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise HintedValueError("a duration must be text such as 15m, not a boolean", DURATION_HINT)
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if not _DURATION_RE.fullmatch(text):
            if text.startswith("-"):
                raise HintedValueError("a duration cannot be negative", DURATION_HINT)
            raise HintedValueError(f"{shown(value)} is not a duration", DURATION_HINT)
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART_RE.findall(text))
    else:
        raise HintedValueError(f"a duration must be text such as 15m, not {yaml_kind(value)}", DURATION_HINT)
    if not math.isfinite(seconds):
        raise HintedValueError("a duration must be a finite number of seconds", DURATION_HINT)
    if seconds < 0:
        raise HintedValueError("a duration cannot be negative", DURATION_HINT)
    if seconds > 10 * 365 * 86400:
        raise HintedValueError("a duration longer than ten years is surely a typo", DURATION_HINT)
    return timedelta(seconds=seconds)


#: The longest run a cost estimate takes (a manifest's ``policies.estimated_hours``, ``orch fit --hours``):
#: ten years, the bound durations have; more is a typo whose total would print as a number hundreds of
#: digits long.
MAX_ESTIMATED_HOURS = 10 * 365 * 24


def estimated_hours(value: float) -> float:
    """An estimated run time in hours, at most ``MAX_ESTIMATED_HOURS`` (finite and > 0 are checked before)."""
    if value > MAX_ESTIMATED_HOURS:
        raise HintedValueError(f"{value:g} hours is more than ten years, surely a typo",
                               f"write the expected run time in hours, at most {MAX_ESTIMATED_HOURS:,}")
    return value


def setting_duration(value: object) -> timedelta:
    """A setting's duration: ``parse_duration``, with text of ASCII digits (an env var's ``120``) as seconds."""
    if isinstance(value, str) and _SECONDS_RE.fullmatch(value.strip()):
        return parse_duration(float(value.strip()))
    return parse_duration(value)


def format_duration(value: timedelta) -> str:
    """The shortest text that parse_duration reads back to the same whole seconds ("1h30m")."""
    seconds = round(value.total_seconds())
    if seconds == 0:
        return "0s"
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)


def parse_price(value: object) -> float:
    """A non-negative amount of US dollars (per hour where the field says so)."""
    if isinstance(value, bool):
        raise HintedValueError("a price must be a number, not a boolean", PRICE_HINT)
    if isinstance(value, int | float):
        amount = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if text.startswith(("-", "$-")):
            raise HintedValueError("a price cannot be negative", PRICE_HINT)
        match = _PRICE_RE.fullmatch(text)
        if not match:
            raise HintedValueError(f"{shown(value)} is not a price", PRICE_HINT)
        amount = float(match.group(1))
    else:
        raise HintedValueError(f"a price must be a number, not {yaml_kind(value)}", PRICE_HINT)
    if not math.isfinite(amount):
        raise HintedValueError("a price must be a finite number", PRICE_HINT)
    if amount < 0:
        raise HintedValueError("a price cannot be negative", PRICE_HINT)
    return amount
