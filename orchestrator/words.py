"""Words agreeing with a number: ``1 offer``, ``2 offers``, and an exception said as words. Loose at the top,
like clock.py: the CLI, the engine, the daemon, the runtime and the rehearsal all say counts. No imports:
``orch quote`` loads it."""

from __future__ import annotations


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and ``noun`` agreeing with it: ``1 GPU``, ``0 GPUs``, ``3 GPUs``; ``many``: a plural that is not
    the noun and an ``s`` (``plural(2, "match", "matches")``)."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


def reason(exc: BaseException, default: str = "no reason given") -> str:
    """What went wrong, as the first line of the exception's own words, never its class name (a user reads a
    sentence, not ``TimeoutError``). A wrapped driver error (SQLAlchemy's ``DBAPIError.orig``) is said in the
    driver's words, without SQLAlchemy's ``(psycopg.OperationalError)`` prefix; ``default`` where it has none."""
    orig = getattr(exc, "orig", None)
    text = str(orig if isinstance(orig, BaseException) else exc).strip()
    return text.splitlines()[0] if text else default
