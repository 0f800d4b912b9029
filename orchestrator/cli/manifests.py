"""``orch schema`` and ``orch validate``: the manifest JSON Schema, and checking manifests offline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.errors import fail, fail_manifests
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app
from orchestrator.words import plural


@app.command()
def schema() -> None:
    """Print the JSON Schema of job manifests (for editors: see docs/manifests.md)."""

    from orchestrator.manifest import json_schema

    sys.stdout.write(dumps(json_schema(), indent=2) + "\n")


@app.command()
def validate(
    paths: Annotated[list[Path], typer.Argument(help="Manifest files or directories (*.yaml, *.yml).",
                                                show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="The result (or the errors) as JSON.")] = False,
) -> None:
    """Check manifests without touching any cloud or database; exit 2 on any error."""

    from orchestrator.manifest import ManifestError, load_manifests

    try:
        loaded = load_manifests(paths, code_needs_repo=True)   # what apply will pack, it checks
    except ManifestError as exc:
        fail_manifests(exc.errors, as_json=as_json)
    except Exception as exc:   # a bug in orch, not in the manifest: still one line, no traceback
        fail(f"internal error while validating: {type(exc).__name__}: {exc}", code=1, as_json=as_json)
    files: list[tuple[Path, int]] = []
    for path in paths:
        if path.is_dir():
            root = path.resolve()
            n = sum(1 for m in loaded if m.source.resolve().is_relative_to(root))
        else:
            n = sum(1 for m in loaded if m.source.resolve() == path.resolve())
        files.append((path, n))
    if as_json:
        sys.stdout.write(dumps({"ok": True, "files": [{"path": str(p), "jobs": n} for p, n in files],
                                     "jobs": [{"name": m.manifest.name, "source": str(m.source)} for m in loaded]},
                                    indent=2) + "\n")
        return
    for path, n in files:
        sys.stdout.write(f"ok {path} ({plural(n, 'job')})\n")
