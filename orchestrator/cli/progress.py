"""Progress of a long wait (``orch down``, ``orch apply --launch``), on stderr so stdout stays the result.

Like ``orch catalog refresh``: a first line saying what is being waited for, then an indented line each
time the state changes (never one per poll), plain text on a terminal and in a pipe alike.
"""

from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    def __init__(self, what: str, stream: TextIO | None = None) -> None:
        self.what = what
        self._stream = stream
        self._last: str | None = None

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr   # looked up late: tests swap sys.stderr

    def __enter__(self) -> Progress:
        self.stream.write(f"{self.what}…\n")
        self.stream.flush()
        return self

    def update(self, text: str) -> None:
        """Say ``text`` unless it is what was said last."""
        if text != self._last:
            self._last = text
            self.stream.write(f"  {text}\n")
            self.stream.flush()

    def __exit__(self, *exc: object) -> None:
        return None
