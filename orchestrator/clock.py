"""The one ``utcnow``: aware UTC time for code that has no injected clock (the engine takes one)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
