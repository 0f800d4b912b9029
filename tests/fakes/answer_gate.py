"""A fake cloud's ``slow(seconds)`` switch: every answer is held until ``slow(0)``, at most ``seconds`` (a hang
guard, not the delay). Held on an event, never slept: a client timeout shorter than ``seconds`` fires however
loaded the machine is, and ``slow(0)`` lets the held answers go (used by the Vast and Azure fakes)."""

from __future__ import annotations

import threading


class AnswerGate:
    def __init__(self) -> None:
        self._open = threading.Event()      # set: answers go at once; clear: held
        self._open.set()
        self._seconds = 0.0

    def slow(self, seconds: float) -> None:
        """Hold every answer from now until ``slow(0)``, at most ``seconds``; ``slow(0)`` releases them."""
        self._seconds = seconds
        if seconds:
            self._open.clear()
        else:
            self._open.set()

    def pass_through(self) -> None:
        """Called before each answer: returns at once unless ``slow`` holds answers."""
        seconds = self._seconds
        if seconds:
            self._open.wait(seconds)
