"""Words agreeing with a number: ``1 offer``, ``2 offers``. Loose at the top, like clock.py: the CLI, the engine,
the daemon, the runtime and the rehearsal all say counts. No imports: ``orch quote`` loads it."""

from __future__ import annotations


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and ``noun`` agreeing with it: ``1 GPU``, ``0 GPUs``, ``3 GPUs``; ``many``: a plural that is not
    the noun and an ``s`` (``plural(2, "match", "matches")``)."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"
