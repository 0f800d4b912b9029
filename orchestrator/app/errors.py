"""The two errors every ``orch`` operation here raises: what failed (exit 1), what cannot be used (exit 2)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class JobsError(RuntimeError):
    """An operation failed (exit 1); the message says what and, where it can, what to do."""


class BadInputError(ValueError):
    """The user's input cannot be used (exit 2)."""


def no_job_named(names: Sequence[str], known: Iterable[str] = ()) -> str:
    """What every command says of job names the store does not hold, and where the names are; the close
    name of ``known`` (the store's jobs) for each where there is one, as git and kubectl's did-you-mean."""
    from difflib import get_close_matches

    pool = list(known)
    meant = [m[0] for n in names if (m := get_close_matches(n, pool, n=1, cutoff=0.75))]
    guess = f"; did you mean {', '.join(repr(m) for m in dict.fromkeys(meant))}?" if meant else ""
    return f"no job named {', '.join(repr(n) for n in names)}{guess} (orch status lists the jobs)"
