"""A restart validates each manifest shape once: every job's manifest and JobSpec are still what validating its
own document gives (orchestrator/store/specs.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from orchestrator.engine.jobspec import jobspec_from_manifest
from orchestrator.manifest.schema import Manifest
from orchestrator.store.specs import Shapes

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _doc(name: str, **over: object) -> dict[str, object]:
    doc: dict[str, object] = {"apiVersion": "orch/v1", "kind": "Job", "name": name,
                              "resources": {"gpu": ["A100-40G"], "count": 1}, "market": "on-demand",
                              "providers": {"allow": ["lambda"]},
                              "run": {"launcher": "command", "command": "python train.py"},
                              "policies": {"deadline": "2h", "idle": {"window": "10m"}}}
    return {**doc, **over}


def _text(doc: dict[str, object]) -> str:
    return Manifest.model_validate(doc).model_dump_json(by_alias=True, exclude_none=True)


def test_jobs_sharing_a_shape_get_what_full_validation_gives_and_the_shape_is_validated_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    texts = [(_text(_doc(f"job-{i}", market="spot" if i % 2 else "on-demand")), T0 + timedelta(minutes=i % 3))
             for i in range(12)]
    expected = [(jobspec_from_manifest(Manifest.model_validate_json(t), at), Manifest.model_validate_json(t))
                for t, at in texts]
    validated: list[str] = []
    real = Manifest.model_validate_json

    def counting(text, *a, **kw):  # type: ignore[no-untyped-def]
        validated.append(json.loads(text)["name"])
        return real(text, *a, **kw)

    monkeypatch.setattr(Manifest, "model_validate_json", counting)
    shapes = Shapes()
    got = [shapes.parse(t, at) for t, at in texts]
    assert got == expected
    assert [m.name for _, m in got] == [f"job-{i}" for i in range(12)]
    assert [s.name for s, _ in got] == [f"job-{i}" for i in range(12)]
    assert [m.to_json() for _, m in got] == [json.loads(t) for t, _ in texts]
    assert validated == ["job-0", "job-1"]        # two shapes (spot / on-demand)
    # each applied_at keeps its own deadline
    assert {s.deadline for s, _ in got} == {T0 + timedelta(minutes=m, hours=2) for m in range(3)}


def test_a_name_the_schema_refuses_is_validated_in_full_and_refused() -> None:
    shapes = Shapes()
    good = _text(_doc("job-a"))
    shapes.parse(good, T0)
    bad = json.dumps({**json.loads(good), "name": "Not_A_Label"})
    with pytest.raises(ValidationError):
        shapes.parse(bad, T0)
    with pytest.raises(ValidationError):
        shapes.parse(json.dumps({**json.loads(good), "name": 7}), T0)
