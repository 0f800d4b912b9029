"""Each job's typed manifest and what the engine derives from it, parsed once per process per content.

Keyed by (job id, manifest hash, applied at): a re-applied manifest gets a new hash and is parsed again; an
unchanged one never is. A restart parses each held job once, straight from the stored JSON text
(``Manifest.model_validate_json``: no ORM rows, no Python JSON decoding), in chunks of one query each.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlmodel import Session

from orchestrator.engine.jobspec import JobSpec, jobspec_from_manifest
from orchestrator.manifest.schema import Manifest
from orchestrator.store import queries

Key = tuple[int, str]


class SpecCache:
    def __init__(self) -> None:
        self._specs: dict[Key, tuple[JobSpec, Manifest]] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self._specs

    def __getitem__(self, key: Key) -> tuple[JobSpec, Manifest]:
        return self._specs[key]

    def load(self, tx: Session, keys: Sequence[Key]) -> None:
        """Parse the manifests of ``keys`` not parsed yet."""
        missing = [job_id for job_id, digest in keys if (job_id, digest) not in self._specs]
        for row in queries.manifest_texts(tx, missing):
            self.add(row.id, row.manifest_hash, Manifest.model_validate_json(row.manifest), row.applied_at)

    def add(self, job_id: int, digest: str, manifest: Manifest, applied_at: datetime) -> tuple[JobSpec, Manifest]:
        found = self._specs[(job_id, digest)] = (jobspec_from_manifest(manifest, applied_at), manifest)
        return found

    def of(self, job_id: int, digest: str, document: dict[str, object], applied_at: datetime
           ) -> tuple[JobSpec, Manifest]:
        found = self._specs.get((job_id, digest))
        return found if found is not None else self.add(job_id, digest, Manifest.model_validate(document), applied_at)
