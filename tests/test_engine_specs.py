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
    assert [m.model_fields_set for _, m in got] == [m.model_fields_set for _, m in expected]
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


def _spaced(doc: dict[str, object]) -> str:
    """As the store writes a manifest (SQLAlchemy's JSON: ``json.dumps``, a blank after each colon)."""
    return json.dumps(Manifest.model_validate(doc).to_json())


@pytest.mark.parametrize("write", [_text, _spaced], ids=["compact", "spaced"])
def test_a_name_read_by_the_database_finds_the_shape_without_decoding(monkeypatch, write) -> None:  # type: ignore[no-untyped-def]
    texts = [(write(_doc(f"job-{i}", market="spot" if i % 2 else "on-demand")), T0) for i in range(6)]
    expected = [(jobspec_from_manifest(Manifest.model_validate_json(t), at), Manifest.model_validate_json(t))
                for t, at in texts]
    decoded: list[str] = []
    real = json.loads
    monkeypatch.setattr("orchestrator.store.specs.json.loads", lambda t: decoded.append(t) or real(t))
    shapes = Shapes()
    got = [shapes.parse(t, at, f"job-{i}") for i, (t, at) in enumerate(texts)]
    assert got == expected
    assert [m.name for _, m in got] == [s.name for s, _ in got] == [f"job-{i}" for i in range(6)]
    assert decoded == []
    assert len(shapes._manifests) == 2


def test_texts_with_another_name_key_are_decoded_and_still_get_what_full_validation_gives() -> None:
    base = json.loads(_spaced(_doc("job-a")))
    also = json.dumps({**base, "setup": ["name"]})                      # "name" also as a value
    nested = json.dumps({**base, "run": {**base["run"], "name": "job-a"}})     # a nested key (refused)
    escaped = json.dumps(base).replace('"name": ', '"n\\u0061me": ')    # the top-level key escaped
    escaped_also = escaped[:-1] + ', "setup": ["name"]}'                # ... and a plain "name" value
    escaped_nested = escaped[:-1] + ', "run": {"name": "job-a"}}'       # ... and a plain nested key
    twice = '{"name": "job-z", ' + json.dumps(base)[1:]                 # duplicate keys: the last one counts
    cases = [(also, "job-a"), (nested, "job-a"), (escaped, "job-a"), (escaped_also, "job-a"),
             (escaped_nested, "job-a"), (twice, "job-a"),
             (json.dumps(base), "job-q")]     # a database name not in the text: the text's own
    for text, name in cases:
        try:
            want: object = Manifest.model_validate_json(text)
        except ValidationError as exc:
            want = type(exc)
        shapes = Shapes()
        shapes.parse(_spaced(_doc("job-c")), T0, "job-c")            # a shape known beforehand
        try:
            got: object = shapes.parse(text, T0, name)[1]
        except ValidationError as exc:
            got = type(exc)
        assert got == want, text


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_restart_reads_the_names_and_parses_every_job_as_full_validation_does(tmp_path, request, dialect) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.app.jobs import apply, load
    from orchestrator.store import open_store, queries
    from orchestrator.store.specs import SpecCache

    url = request.getfixturevalue("pg_url") if dialect == "postgresql" else f"sqlite:///{tmp_path}/s.db"
    store = open_store(url)
    docs = [_doc(f"job-{i}", market="spot" if i % 3 else "on-demand") for i in range(7)]
    docs[4] = {**docs[4], "setup": ["name"]}        # "name" twice in its text: decoded

    paths = []
    for i, doc in enumerate(docs):
        paths.append(tmp_path / f"m{i}.yaml")
        paths[-1].write_text(json.dumps(doc))
    apply(store, load(paths), now=T0)
    try:
        with store.transaction() as tx:
            rows = queries.job_columns(tx, active=True)
            texts = queries.manifest_texts(tx, [r.id for r in rows])
            cache = SpecCache()
            cache.load(tx, [(r.id, r.manifest_hash) for r in rows])
        named = {t.id: t.name for t in texts}
        assert set(named.values()) == ({f"job-{i}" for i in range(7)} if store.dialect == "postgresql" else {None})
        for r, text in zip(rows, sorted(texts), strict=True):
            spec, manifest = cache[(r.id, r.manifest_hash)]
            assert manifest == Manifest.model_validate_json(text.manifest)
            assert spec == jobspec_from_manifest(manifest, text.applied_at)
            assert manifest.name == r.name
    finally:
        store.close()
