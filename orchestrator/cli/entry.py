"""The ``orch`` console script: ``orch quote`` in its common forms without the command-line framework.

A quote is the command people type most, and importing Typer, Click and every command module costs more than
the quote itself. ``run`` parses the quote's flags itself when the command line is one of the plain forms
below, and calls the same ``run_quote`` the Typer command calls, so the output is the same bytes. Anything
else (another command, ``--help``, ``--history``, ``--live``, an unknown flag, a value that is not a plain
number, a stray argument) goes to the full command line unchanged, which parses it, or refuses it, as always.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import types
from collections.abc import Sequence

TYPE_CHECKING = False  # not typing's: typing costs `orch quote` ~3 ms to import

if TYPE_CHECKING:
    from orchestrator.cli.quote_run import QuoteArgs


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
    from orchestrator.cli.quote_run import InterconnectOpt, QuoteArgs, SortOpt

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


class _DeferredModule(types.ModuleType):
    """A module whose code runs when a name it does not have yet is first read (``importlib.util.LazyLoader``
    loads on any attribute, ``__spec__`` included, which Python 3.11's import statement reads: so ``import
    inspect`` in dataclasses would load it at once). The module object stays the same one, loaded in place."""

    def __getattr__(self, name: str) -> object:
        spec = self.__spec__
        self.__class__ = types.ModuleType
        try:
            spec.loader.exec_module(self)  # type: ignore[union-attr]
        except BaseException:
            sys.modules.pop(spec.name, None)
            raise
        return getattr(self, name)


def _defer_unused_imports() -> None:
    """Load ``inspect`` and ``copy`` on their first use rather than at import.

    ``dataclasses`` imports both at its top, but uses ``inspect`` only to write a docstring for a class that has
    none and ``copy`` only in ``asdict``/``astuple``; importing them (``inspect`` brings ``ast``, ``dis`` and
    ``tokenize``) was the largest single cost of a quote's imports (tests/bench/bench_quote.py). Every dataclass a
    quote defines has a docstring, so a quote loads neither; any other use loads them in full, as usual. Only for
    ``orch quote``: every other command imports Typer, which uses ``inspect`` at once anyway."""
    import importlib.util

    for name in ("inspect", "copy"):
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        module.__class__ = _DeferredModule
        sys.modules[name] = module


def run(argv: Sequence[str] | None = None) -> None:
    """The console script's entry point (see the module docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["quote"]:
        # A quote lives a few dozen milliseconds and makes few reference cycles (the classes and functions its
        # imports define, alive until exit anyway): the cycle collector's passes over them are work for nothing,
        # ~5 % of its CPU time (tests/bench/bench_quote.py). Reference counting frees everything else as usual.
        gc.disable()
        _defer_unused_imports()
    parsed = lean_quote_args(args[1:]) if args[:1] == ["quote"] else None
    if parsed is None:
        gc.enable()
        from orchestrator.cli.main import run as full

        full()
        return
    from orchestrator.cli.quote_run import run_quote

    try:
        try:
            run_quote(parsed)
        finally:
            sys.stdout.flush()   # here, not at exit: a reader that went away is seen while it can be handled
    except BrokenPipeError:
        from orchestrator.cli.errors import stdout_closed

        stdout_closed()
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception as exc:
        # The same one line, not a traceback, that the full command line gives an escaped exception.
        if os.environ.get("ORCH_DEBUG"):
            raise
        from orchestrator.cli.errors import internal_error

        internal_error(exc)
    sys.exit(0)
