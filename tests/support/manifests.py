"""Small valid job manifests for tests that need a job in a store (the engine keeps the typed manifest)."""

from __future__ import annotations

from typing import Any

from orchestrator.engine.events import EventKind
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


def store_unchecked_job(tx: Any, name: str, manifest: dict[str, Any], manifest_hash: str, *, now: Any,
                        source: str | None = None) -> Any:
    """A jobs row written as given, past the typed API (``repo.upsert_job`` takes a validated Manifest): what
    an older orch, another tool or a hand edit may have left, for readers that must survive it (the console)."""
    from orchestrator.store import repo
    from orchestrator.store.models import Job

    job = Job(name=name, manifest=manifest, manifest_hash=manifest_hash, source_path=source, applied_at=now,
              created_at=now, updated_at=now)
    tx.add(job)
    tx.flush()
    repo.record_event(tx, EventKind.JOB_CREATED, f"job {name} created", job_id=job.id, data={"hash": manifest_hash},
                      ts=now)
    return job
