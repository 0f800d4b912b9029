"""Calls started at once: the multi-daemon tests' rounds, where several daemons (and commands) act on one store
together."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence


def run_together(
    calls: Sequence[Callable[[], object]],
    *,
    started: Callable[[list[threading.Thread]], None] | None = None,
    ended: Callable[[], None] | None = None,
    start_s: float = 30,
    join_s: float = 60,
) -> dict[int, BaseException]:
    """Run each call in its own thread, all released by one barrier; return what each raised, by its index.

    ``started`` is given the threads before any runs (to tell which thread is whose); ``ended`` runs in each
    thread after its call, raised or not. A call still running ``join_s`` seconds after the threads' start is
    reported as a ``TimeoutError`` (a failsafe against a hung call; the calls' outcomes never hinge on it)."""
    barrier = threading.Barrier(len(calls))
    errors: dict[int, BaseException] = {}

    def run(index: int, call: Callable[[], object]) -> None:
        try:
            barrier.wait(timeout=start_s)
            call()
        except BaseException as exc:  # surfaced to the caller, in the test's thread
            errors[index] = exc
        finally:
            if ended is not None:
                ended()

    threads = [threading.Thread(target=run, args=(i, call), daemon=True) for i, call in enumerate(calls)]
    if started is not None:
        started(threads)
    for t in threads:
        t.start()
    for i, t in enumerate(threads):
        t.join(timeout=join_s)
        if t.is_alive():
            errors.setdefault(i, TimeoutError(f"call {i} still running after {join_s:.0f} s"))
    return errors
