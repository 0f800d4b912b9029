"""How the CLI fails: one clear line on stderr and an exit code, never a traceback, never a secret.

Exit codes: 0 ok; 1 nothing matched / operation failed; 2 bad input (usage, manifest, flags). Every
message goes through ``orchestrator.redaction.safe_line``: a value that looks like a credential is
replaced by what kind of thing it is.
"""

from __future__ import annotations

import sys
from typing import NoReturn

EXIT_NO_MATCH = 1
EXIT_BAD_INPUT = 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    from orchestrator.redaction import safe_line

    sys.stderr.write(f"error: {safe_line(message)}\n")
    raise SystemExit(code)


def warn(message: str) -> None:
    """A ``warning:`` line on stderr, redacted like ``fail``."""
    from orchestrator.redaction import safe_line

    sys.stderr.write(f"warning: {safe_line(message)}\n")


def internal_error(exc: BaseException) -> NoReturn:
    """A bug in orch, not in the input: one line (exit 1), redacted; ORCH_DEBUG=1 shows the traceback."""
    text = str(exc).strip().splitlines()
    fail(f"internal error: {type(exc).__name__}: {text[0] if text else ''} (a bug in orch: please report it; "
         "ORCH_DEBUG=1 shows the traceback)", EXIT_NO_MATCH)


def check_number(flag: str, value: float | None, *, low: float | None = None, high: float | None = None,
                 above: bool = False) -> None:
    """Refuse (exit 2) a flag's value that is not finite or not within [low, high] (``above``: > low)."""
    import math

    if value is None:
        return
    if not math.isfinite(value):
        fail(f"{flag} must be a finite number, got {value}")
    if low is not None and (value < low or (above and value == low)):
        bound = "not be negative" if low == 0 and not above else f"be {'more than' if above else 'at least'} {low:g}"
        fail(f"{flag} must {bound}, got {value:g}")
    if high is not None and value > high:
        fail(f"{flag} must be at most {high:g}, got {value:g}")
