"""Each job's typed manifest and what the engine derives from it, parsed once per process per content.

Keyed by (job id, manifest hash, applied at): a re-applied manifest gets a new hash and is parsed again; an
unchanged one never is. A restart parses each held job once, straight from the stored JSON text, in chunks of
one query each.

Many jobs share one manifest but for their names (a sweep, a fleet applied from one template): a restart
validates each such shape once (``Shapes``) and gives every other job of it a copy under its own name. The name
is the only field that differs, it is checked against the same pattern, and no validator of the manifest reads
it, so the copy is what validating the whole document would give; a name that fails the pattern is validated
in full (its error is the schema's). A shape is found without decoding the text where it can be: the text
around its one plain ``"name"`` key, the name read by the database (``_around``); else the decoded document
without its name, encoded again (about twice the CPU: ~0.2 s of a 10k restart).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlmodel import Session

from orchestrator.engine.jobspec import JobSpec, jobspec_from_manifest
from orchestrator.manifest.schema import NAME_PATTERN, Manifest
from orchestrator.store import queries

Key = tuple[int, str]
_SPEC_FIELDS = tuple(f for f in dataclasses.fields(JobSpec) if f.init)
_NAME = re.compile(NAME_PATTERN)


class Shapes:
    """Manifests (and their JobSpecs) by their content without the name, valid for one restart's load."""

    def __init__(self) -> None:
        self._manifests: dict[object, Manifest] = {}
        self._specs: dict[tuple[object, datetime], tuple[JobSpec, dict[str, Any]]] = {}

    def parse(self, text: str, applied_at: datetime, name: str | None = None) -> tuple[JobSpec, Manifest]:
        """``text``'s manifest and JobSpec. ``name``: its top-level name as the database read it (None: decoded
        here)."""
        shape: object = _around(text, name) if name is not None else None
        if shape is None:
            doc = json.loads(text)
            name = doc.pop("name", None) if isinstance(doc, dict) else None
            if isinstance(name, str):
                shape = json.dumps(doc, sort_keys=True)
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            manifest = Manifest.model_validate_json(text)         # raises the schema's own error
            return jobspec_from_manifest(manifest, applied_at), manifest
        template = self._manifests.get(shape)
        if template is None:
            template = Manifest.model_validate_json(text)
            if template.name != name:       # not the name the shape was cut around (duplicate keys): not shared
                return jobspec_from_manifest(template, applied_at), template
            self._manifests[shape] = template
        manifest = template if template.name == name else _renamed(template, name)
        found = self._specs.get((shape, applied_at))
        if found is None:
            spec = jobspec_from_manifest(manifest, applied_at)
            found = self._specs[(shape, applied_at)] = (spec, {f.name: getattr(spec, f.name) for f in _SPEC_FIELDS})
        spec, fields = found
        # The constructor with the shape's fields, not dataclasses.replace (its introspection per job was
        # about half the CPU of this loop at 10k jobs).
        return (spec if spec.name == name else JobSpec(**{**fields, "name": name})), manifest


def _renamed(template: Manifest, name: str) -> Manifest:
    """``template.model_copy(update={"name": name})``, done as that copy does it (a shallow copy of the
    instance's dict, extra, private and set fields) without its generic steps: a third of its CPU, ~0.06 s of
    a 10k restart."""
    copied = Manifest.__new__(Manifest)
    _set(copied, "__dict__", {**template.__dict__, "name": name})
    extra, private = template.__pydantic_extra__, template.__pydantic_private__
    _set(copied, "__pydantic_extra__", None if extra is None else dict(extra))
    _set(copied, "__pydantic_fields_set__", template.__pydantic_fields_set__ | {"name"})
    _set(copied, "__pydantic_private__", None if private is None else dict(private))
    return copied


_set = object.__setattr__


def _around(text: str, name: str) -> tuple[str, str] | None:
    """The text before and after its one ``"name"`` key and value (as json.dumps or a compact dump writes
    them): two texts with the same answer differ only in that value (and the blank after its colon). None
    where the text has another ``"name"`` (a nested key, a duplicate, a value) or writes this one otherwise:
    decoded instead.

    Why it is sound: inside a JSON string a quote is escaped, so the needle found is a ``"name"`` key, the
    text's only plain one. If it is the top-level name, two texts with the same parts differ in the name alone;
    if the top-level name is written otherwise (escaped), it lies in the equal parts: both texts then have
    the same name (the needle's value), so they are the same text."""
    if text.count('"name"') != 1:
        return None
    quoted = json.dumps(name)
    for needle in (f'"name": {quoted}', f'"name":{quoted}'):
        at = text.find(needle)
        if at >= 0:
            return text[:at], text[at + len(needle):]
    return None


class SpecCache:
    def __init__(self) -> None:
        self._specs: dict[Key, tuple[JobSpec, Manifest]] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self._specs

    def __getitem__(self, key: Key) -> tuple[JobSpec, Manifest]:
        return self._specs[key]

    def load(self, tx: Session, keys: Sequence[Key]) -> None:
        """Parse the manifests of ``keys`` not parsed yet (each shape validated once, see ``Shapes``)."""
        missing = [job_id for job_id, digest in keys if (job_id, digest) not in self._specs]
        shapes = Shapes()
        for row in queries.manifest_texts(tx, missing):
            self._specs[(row.id, row.manifest_hash)] = shapes.parse(row.manifest, row.applied_at, row.name)

    def add(self, job_id: int, digest: str, manifest: Manifest, applied_at: datetime) -> tuple[JobSpec, Manifest]:
        found = self._specs[(job_id, digest)] = (jobspec_from_manifest(manifest, applied_at), manifest)
        return found

    def of(self, job_id: int, digest: str, document: dict[str, object], applied_at: datetime
           ) -> tuple[JobSpec, Manifest]:
        found = self._specs.get((job_id, digest))
        return found if found is not None else self.add(job_id, digest, Manifest.model_validate(document), applied_at)
