"""How the CLI fails: one clear line on stderr and an exit code, never a traceback.

Exit codes: 0 ok; 1 nothing matched / operation failed; 2 bad input (usage, manifest, flags).
With ``--json`` a command also writes ``{"error": ...}`` on stdout, so a script always reads valid JSON
there; the exit code is the same either way.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from orchestrator.manifest import ManifestError

EXIT_NO_MATCH = 1
EXIT_BAD_INPUT = 2


def fail(message: str, code: int = EXIT_BAD_INPUT, *, as_json: bool = False) -> NoReturn:
    if as_json:
        sys.stdout.write(json.dumps({"error": message}) + "\n")
    sys.stderr.write(f"error: {message}\n")
    raise SystemExit(code)


def fail_manifests(errors: Sequence[ManifestError], *, as_json: bool = False) -> NoReturn:
    """Manifest problems: one ``path:line:col: field: what (hint)`` line each on stderr; exit 2."""
    for error in errors:
        sys.stderr.write(error.format() + "\n")
    if as_json:
        sys.stdout.write(json.dumps({
            "error": f"{len(errors)} problem(s) in the manifests",
            "errors": [{"path": str(e.path), "line": e.line, "column": e.col, "field": e.field or None,
                        "message": e.message, "hint": e.hint} for e in errors]}) + "\n")
    raise SystemExit(EXIT_BAD_INPUT)
