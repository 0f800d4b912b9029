"""``--watch``: redraw a command's output in place every interval until Ctrl-C.

On a terminal the frame is redrawn in place (rich's Live); in a pipe each frame is written whole, one
after the other (a blank line between them), so ``orch status --watch | tee log`` keeps a history. JSON frames
(``json_lines``) are one document per line, with no blank line between: JSON Lines, which a reader parses line
by line.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TextIO

#: Waits between frames (tests replace it to drive frames without a clock).
sleep: Callable[[float], None] = time.sleep


def check_interval(seconds: float) -> str | None:
    """Why ``seconds`` is not a usable interval, or None."""
    if not math.isfinite(seconds) or seconds <= 0:
        return f"--interval must be a finite number of seconds > 0, got {seconds:g}"
    return None


def watch(render: Callable[[], str], interval_s: float, *, stream: TextIO | None = None,
          terminal: bool | None = None, json_lines: bool = False) -> None:
    """Show ``render()`` every ``interval_s`` seconds until Ctrl-C (which ends it quietly); ``json_lines``: each
    frame is one line of JSON, written after the last, never redrawn."""
    out = stream or sys.stdout
    live_view = False if json_lines else out.isatty() if terminal is None else terminal
    try:
        if live_view:
            _live(render, interval_s, out)
        else:
            _frames(render, interval_s, out, "" if json_lines else "\n")
    except KeyboardInterrupt:
        pass


def _frames(render: Callable[[], str], interval_s: float, out: TextIO, between: str) -> None:
    first = True
    while True:
        out.write(("" if first else between) + render().rstrip("\n") + "\n")
        out.flush()
        first = False
        sleep(interval_s)


def _live(render: Callable[[], str], interval_s: float, out: TextIO) -> None:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console(file=out, force_terminal=True, highlight=False)
    with Live(Text(render()), console=console, auto_refresh=False, transient=False) as live:
        while True:
            sleep(interval_s)
            live.update(Text(render()), refresh=True)
