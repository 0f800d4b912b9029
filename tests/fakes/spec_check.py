"""Validating a request body against a vendored spec (tests/fakes/schemas/), for the fakes that serve JSON APIs.

The Vast, Lambda and RunPod fakes call ``spec_errors`` on every launch request before acting on it and answer a
body that fails with that provider's own error shape, so a request the real API would refuse fails in the tests
too. jsonschema is imported on first use: a fake still starts standalone without it until a launch arrives.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).parent / "schemas"


@cache
def _document(name: str) -> dict[str, Any]:
    return dict(json.loads((SCHEMAS / name).read_text()))


@cache
def _validator(document: str, ref: str) -> Any:
    from jsonschema import Draft202012Validator

    doc = _document(document)
    defs = {k: doc[k] for k in ("$defs", "components") if k in doc}
    return Draft202012Validator({"$ref": ref, **defs})


def spec_errors(document: str, ref: str, body: Any) -> list[str]:
    """Every way ``body`` breaks the schema at ``ref`` (a JSON pointer such as ``#/$defs/x``) of the vendored
    ``document``; empty when the spec takes it."""
    errors = sorted(_validator(document, ref).iter_errors(body), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(str(p) for p in e.absolute_path) or 'body'}: {e.message}" for e in errors]
