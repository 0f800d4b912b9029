"""Screen a manifest's text values before validation: no credentials, no control characters.

A manifest is committed to a repository and its values reach the store, the rendered node script and
the terminal, so a value that looks like a credential is refused wherever it is written, naming what it
looks like and where, never showing it; the fix is ``secrets:`` (the NAME of an environment variable the
launch environment supplies). Control characters (newlines and tabs included) are refused in every text
value, except newlines and tabs in ``env`` values and in ``setup`` written as one block; bidirectional
formatting characters and Unicode line separators are refused everywhere (they make a script read
differently from what runs).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from orchestrator.redaction import find_secret

Path_ = tuple[str | int, ...]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_TAB_NEWLINE = re.compile(r"[\t\n]")
_NAMES = {"\n": "a newline", "\t": "a tab", "\r": "a carriage return", "\x00": "a NUL character",
          "\x1b": "an escape character"}


@dataclass(frozen=True, slots=True)
class Finding:
    path: Path_
    on_key: bool
    message: str
    hint: str


def _strings(data: Any, path: Path_ = ()) -> Iterator[tuple[Path_, bool, str]]:
    """Every text key and value of ``data`` with its path (a key's path is the path of its value)."""
    stack: list[tuple[Path_, Any]] = [(path, data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            yield where, False, value
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str):
                    yield (*where, key), True, key
                stack.append(((*where, key), item))
        elif isinstance(value, list):
            stack.extend(((*where, i), item) for i, item in enumerate(value))


def _allows_newlines(path: Path_, on_key: bool) -> bool:
    if on_key:
        return False
    return (len(path) == 2 and path[0] == "env") or path == ("setup",)


def _secret_hint(path: Path_, on_key: bool) -> str:
    if on_key and path[:1] == ("env",) and len(path) == 2:
        # The key is the credential: naming it back as a variable (secrets: [KEY]) would advise a value.
        return ("env names are variable names such as HF_TOKEN; put the value in your environment and list "
                "the name under secrets:")
    if path and path[0] == "env":
        name = path[1] if len(path) > 1 and isinstance(path[1], str) else "NAME"
        return (f"list its name under secrets: (secrets: [{name}]) and export {name} where orch runs; "
                "the launch environment supplies the value")
    return ("a manifest holds no credentials: put it in an environment variable, name that variable under "
            "secrets:, and export it where orch runs")


def _control_name(ch: str) -> str:
    return _NAMES.get(ch) or f"control character U+{ord(ch):04X} ({unicodedata.name(ch, 'unnamed')})"


def screen(data: Any) -> list[Finding]:
    """Every secret-looking or control-character-bearing text in one document's data, in document order."""
    findings: list[Finding] = []
    for path, on_key, text in _strings(data):
        kind = find_secret(text)
        if kind is not None and path[:1] == ("secrets",) and not on_key:
            findings.append(Finding(path, on_key, "give the NAME of an environment variable, not its value",
                                    f"this looks like {kind}; e.g. secrets: [HF_TOKEN, WANDB_API_KEY]"))
        elif kind is not None:
            findings.append(Finding(path, on_key, f"this {'key' if on_key else 'value'} looks like {kind} "
                                    "(not shown)", _secret_hint(path, on_key)))
        if kind is not None:
            continue
        bad = _CONTROL.search(text)
        if bad is None and not _allows_newlines(path, on_key):
            bad = _TAB_NEWLINE.search(text)
        if bad is not None:
            hint = "write it on one line without control characters"
            if path and path[0] == "run" and "command" in path:
                hint = "put several commands on one line with && or ;, or in a script; setup: takes lines"
            findings.append(Finding(path, on_key, f"{_control_name(bad.group())} is not allowed here "
                                    f"(at character {bad.start() + 1})", hint))
    findings.reverse()   # _strings walks a stack; report in the order the document reads
    return findings
