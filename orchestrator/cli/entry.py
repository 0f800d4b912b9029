"""The ``orch`` console script: ``orch quote`` in its common forms without the command-line framework.

A quote is the command people type most, and importing Typer, Click and every command module costs more than
the quote itself. ``run`` parses the quote's flags itself when the command line is one of the plain forms
below, and calls the same ``run_quote`` the Typer command calls, so the output is the same bytes. Anything
else (another command, ``--help``, ``--history``, ``--live``, an unknown flag, a value that is not a plain
number, a stray argument) goes to the full command line unchanged, which parses it, or refuses it, as always.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

from orchestrator.cli.quote_run import InterconnectOpt, QuoteArgs, SortOpt

#: Flags that take a value: (the QuoteArgs field, how the value is read; "text+" may repeat).
_VALUED: dict[str, tuple[str, str]] = {
    "--gpu": ("gpu", "text+"), "-g": ("gpu", "text+"),
    "--count": ("count", "int"), "-c": ("count", "int"),
    "--nodes": ("nodes", "int"), "-n": ("nodes", "int"),
    "--provider": ("provider", "text+"), "-p": ("provider", "text+"),
    "--region": ("region", "text+"), "-r": ("region", "text+"),
    "--max-price": ("max_price", "float"),
    "--min-vram": ("min_vram", "float"),
    "--interconnect": ("interconnect", "interconnect"),
    "--sort": ("sort", "sort"),
    "--limit": ("limit", "int"),
}
_FLAGS: dict[str, str] = {
    "--spot": "spot", "--on-demand": "on_demand", "--json": "as_json", "--wide": "wide", "-w": "wide",
    "--all-regions": "all_regions",
}
# Only what Click reads the same way: ASCII digits (Click's int() would also take "+4", "4_0", " 4" and other
# scripts' digits; those go to Click).
_INT = re.compile(r"[0-9]{1,9}")
_FLOAT = re.compile(r"[0-9]{1,12}(\.[0-9]{1,12})?")


def lean_quote_args(argv: Sequence[str]) -> QuoteArgs | None:
    """The quote's flags (the words after ``quote``) when they are all plain forms, else None."""
    values: dict[str, object] = {}
    lists: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        name, eq, inline = word.partition("=")
        if name in _FLAGS and not eq:
            values[_FLAGS[name]] = True
            i += 1
            continue
        spec = _VALUED.get(name)
        if spec is None or (eq and not name.startswith("--")):
            return None
        if eq:
            text = inline
        elif i + 1 < len(argv):
            text = argv[i + 1]
            i += 1
        else:
            return None
        i += 1
        field, kind = spec
        if kind == "text+":
            if text.startswith("-"):
                return None
            lists.setdefault(field, []).append(text)
        elif kind == "int":
            if not _INT.fullmatch(text):
                return None
            values[field] = int(text)
        elif kind == "float":
            if not _FLOAT.fullmatch(text):
                return None
            values[field] = float(text)
        elif kind == "interconnect":
            if text not in InterconnectOpt._value2member_map_:
                return None
            values[field] = InterconnectOpt(text)
        else:
            if text not in SortOpt._value2member_map_:
                return None
            values[field] = SortOpt(text)
    return QuoteArgs(**values, **{k: tuple(v) for k, v in lists.items()})  # type: ignore[arg-type]


def run(argv: Sequence[str] | None = None) -> None:
    """The console script's entry point (see the module docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    parsed = lean_quote_args(args[1:]) if args[:1] == ["quote"] else None
    if parsed is None:
        from orchestrator.cli.main import run as full

        full()
        return
    from orchestrator.cli.quote_run import run_quote

    try:
        run_quote(parsed)
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception as exc:
        # The same one line, not a traceback, that the full command line gives an escaped exception.
        if os.environ.get("ORCH_DEBUG"):
            raise
        from orchestrator.cli.errors import internal_error

        internal_error(exc)
    sys.exit(0)
