"""How the CLI fails: one clear line on stderr and an exit code, never a traceback, never a secret.

Exit codes: 0 ok; 1 nothing matched / operation failed; 2 bad input (usage, manifest, flags; a database URL wrong
as written, while a store that cannot be used is 1: ``common.fail_store``); 141 the reader of
stdout went away (``orch quote | head``), silently, as a Unix tool killed by SIGPIPE. Every
message goes through ``orchestrator.redaction.safe_line``: a value that looks like a credential is
replaced by what kind of thing it is. With ``--json`` a command also writes ``{"error": ...}`` on stdout,
so a script always reads valid JSON there; the exit code is the same either way.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

TYPE_CHECKING = False  # not typing's: `orch quote` imports this module, and typing costs it ~3 ms

if TYPE_CHECKING:
    from typing import NoReturn

    from orchestrator.manifest import ManifestError

EXIT_NO_MATCH = 1
EXIT_BAD_INPUT = 2
#: What a shell reports for a process SIGPIPE killed (128 + 13): ``yes | head`` gives it to ``yes``.
EXIT_STDOUT_CLOSED = 141


def fail(message: str, code: int = EXIT_BAD_INPUT, *, as_json: bool = False) -> NoReturn:
    from orchestrator.redaction import safe_line

    line = safe_line(message)
    if as_json:
        sys.stdout.write(json.dumps({"error": line}) + "\n")
    sys.stderr.write(f"error: {line}\n")
    raise SystemExit(code)


def fail_manifests(errors: Sequence[ManifestError], *, as_json: bool = False) -> NoReturn:
    """Manifest problems: one ``path:line:col: field: what (hint)`` line each on stderr; exit 2."""
    for error in errors:
        sys.stderr.write(error.format() + "\n")
    if as_json:
        from orchestrator.redaction import safe_line
        from orchestrator.words import plural

        def safe(text: object) -> str | None:   # redacted as format() redacts the line: a key named as a token
            return safe_line(str(text), 1000) if text else None   # was whole in the hint of the JSON document

        sys.stdout.write(json.dumps({
            "error": f"{plural(len(errors), 'problem')} in the manifests",
            "errors": [{"path": safe(e.path), "line": e.line, "column": e.col, "field": safe(e.field),
                        "message": safe(e.message), "hint": safe(e.hint)} for e in errors]}) + "\n")
    raise SystemExit(EXIT_BAD_INPUT)


def stdout_closed() -> NoReturn:
    """Exit quietly (141) because the reader of stdout went away (``orch quote | head -3``): not a bug in orch.

    Called on a BrokenPipeError. stdout's descriptor is pointed at /dev/null first, so that what is still
    buffered goes there when Python flushes at exit, instead of failing again with "Exception ignored ...
    BrokenPipeError" (the recipe of Python's ``signal`` docs, "Note on SIGPIPE"). SIGPIPE itself stays ignored:
    a daemon or console must not die when a peer closes a socket."""
    try:
        fd = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != fd:
            os.dup2(devnull, fd)
            os.close(devnull)
    except (OSError, ValueError):   # no stdout descriptor (replaced by a test's buffer): nothing buffered to lose
        pass
    raise SystemExit(EXIT_STDOUT_CLOSED)


#: The columns a line orch writes for a person fits in (a terminal's default): text wraps at spaces, so a word
#: longer than this (a path, a URL) stays whole on its own line.
WIDTH = 80


def wrap(text: str, indent: str = "  ", first: str = "") -> str:
    """``text`` as lines of at most WIDTH columns: the first starts with ``first``, the others with ``indent``."""
    import textwrap  # only when something is wrapped: `orch quote` into a pipe imports none of it

    return textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


def warn(message: str) -> None:
    """A ``warning:`` line on stderr, redacted like ``fail``."""
    from orchestrator.redaction import safe_line

    sys.stderr.write(f"warning: {safe_line(message)}\n")


def warn_library_logs() -> None:
    """A library's warnings (a provider's ``log.warning``: live prices unavailable, a fallback taken) become the
    command's own ``warning:`` lines, redacted. Without it logging's last resort printed the bare message, not
    redacted (a cloud's error text may echo a key). Only where no handler is configured (the daemon has its own)."""
    import logging

    class _WarningLines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                warn(record.getMessage())
            except Exception:   # a message that cannot be formatted: logging's own report, never a crash
                self.handleError(record)

    logging.lastResort = _WarningLines(logging.WARNING)


def internal_error(exc: BaseException) -> NoReturn:
    """A bug in orch, not in the input: one line (exit 1), redacted; ORCH_DEBUG=1 shows the traceback."""
    text = str(exc).strip().splitlines()
    fail(f"internal error: {type(exc).__name__}: {text[0] if text else ''} (a bug in orch: please report it; "
         "ORCH_DEBUG=1 shows the traceback)", EXIT_NO_MATCH)


#: The shortest ``--poll`` interval: 0 would poll the store in a busy loop (100 % of a CPU) while following.
MIN_POLL_S = 0.05


def check_number(flag: str, value: float | None, *, low: float | None = None, high: float | None = None,
                 above: bool = False, as_json: bool = False) -> None:
    """Refuse (exit 2) a flag's value that is not finite or not within [low, high] (``above``: > low)."""
    import math

    if value is None:
        return
    if not math.isfinite(value):
        fail(f"{flag} must be a finite number, got {value}", as_json=as_json)
    if low is not None and (value < low or (above and value == low)):
        bound = "not be negative" if low == 0 and not above else f"be {'more than' if above else 'at least'} {low:g}"
        fail(f"{flag} must {bound}, got {value:g}", as_json=as_json)
    if high is not None and value > high:
        fail(f"{flag} must be at most {high:g}, got {value:g}", as_json=as_json)
