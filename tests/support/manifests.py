"""Small valid job manifests for tests that need a job in a store (the engine keeps the typed manifest)."""

from __future__ import annotations

from typing import Any

from orchestrator.manifest.schema import Manifest


def manifest_doc(name: str, *, gpus: list[str] | None = None, count: int = 1, nodes: int = 1,
                 **sections: Any) -> dict[str, Any]:
    """A command job on ``gpus`` x ``count`` (``nodes`` machines); ``sections`` replace top-level keys."""
    doc: dict[str, Any] = {"apiVersion": "orch/v1", "kind": "Job", "name": name,
                           "resources": {"gpu": gpus or ["A100-80G"], "count": count, "nodes": nodes},
                           "run": {"launcher": "command", "command": "python train.py"}}
    doc.update(sections)
    return doc


def manifest(name: str, **kw: Any) -> Manifest:
    return Manifest.model_validate(manifest_doc(name, **kw))
