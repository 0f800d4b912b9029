"""``--json`` output that is always JSON: a non-finite number (which ``json.dumps`` would write as
``NaN``/``Infinity``, which no JSON parser reads) becomes null."""

from __future__ import annotations

import json
import math

TYPE_CHECKING = False  # not typing's: `orch quote` imports this module, and typing costs it ~3 ms

if TYPE_CHECKING:
    from typing import Any


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def dumps(doc: Any, *, indent: int | None = None) -> str:
    """``doc`` as strict JSON (RFC 8259): NaN and infinities as null."""
    return json.dumps(_finite(doc), indent=indent, allow_nan=False, default=str)
