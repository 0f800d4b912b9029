"""Fuzz the loader: whatever the YAML, it returns models or raises ManifestError, never anything else."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.manifest import Manifest, ManifestError, parse_text

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SEEDS = [p.read_text() for p in sorted(EXAMPLES.glob("*.yaml"))]
SEED_DATA = [yaml.safe_load(t) for t in SEEDS]

FUZZ = settings(max_examples=1500, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
YAML_CHARS = string.printable + "\u00e9\u2603\t"
YAML_TOKENS = [":", "- ", "  ", "\n", "[", "]", "{", "}", ",", "&a ", "*a", "!!str ", "!!python/none ", "'",
               '"', "#", "---\n", "<<: ", "? ", "|", ">", "%YAML 1.1\n", "\x00", "\ufeff", "~", "-1", "1e400"]


def _check(text: str) -> None:
    try:
        result = parse_text(text, "fuzz.yaml")
    except ManifestError as exc:
        for error in exc.errors:
            line = str(error)
            assert line.startswith("fuzz.yaml")
            assert "\n" not in error.message or error.message.count("\n") < 5
        return
    for manifest, _pos in result:
        assert isinstance(manifest, Manifest)
        assert Manifest.model_validate(manifest.to_json()) == manifest


@st.composite
def text_mutations(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "token", "dup-line"]))
        if op == "insert":
            text = text[:pos] + draw(st.text(YAML_CHARS, min_size=1, max_size=4)) + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 12)):]
        elif op == "replace":
            text = text[:pos] + draw(st.text(YAML_CHARS, min_size=1, max_size=3)) + text[pos + 1:]
        elif op == "token":
            text = text[:pos] + draw(st.sampled_from(YAML_TOKENS)) + text[pos:]
        else:
            lines = text.splitlines(keepends=True)
            i = draw(st.integers(0, max(len(lines) - 1, 0)))
            text = "".join(lines[: i + 1] + lines[i:])
    return text


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["15m", "-1", "$2.5", "A100", "s3://b/k", "SIGUSR1",
                                                           "orch/v1", "Job", "on-demand", "torchrun", "2h30m"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=8)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def structure_mutations(draw: st.DrawFn) -> Any:
    import copy

    data = copy.deepcopy(draw(st.sampled_from(SEED_DATA)))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        new = draw(values)
        if not path:
            if draw(st.booleans()):
                data = new
            continue
        parent: Any = data
        for part in path[:-1]:
            parent = parent[part]
        op = draw(st.sampled_from(["set", "delete", "rename"]))
        if op == "set" or isinstance(parent, list):
            parent[path[-1]] = new
        elif op == "delete":
            del parent[path[-1]]
        else:
            parent[draw(st.text(max_size=10)) + "x"] = parent.pop(path[-1])
    return data


@FUZZ
@given(text_mutations())
def test_mutated_yaml_text(text: str) -> None:
    _check(text)


@FUZZ
@given(structure_mutations())
def test_mutated_structures(data: Any) -> None:
    try:
        # libyaml's emitter when there is one (what it writes is YAML all the same, 10x sooner)
        text = yaml.dump(data, Dumper=_DUMPER, allow_unicode=True, sort_keys=False)
    except yaml.YAMLError:
        return
    _check(text)


@settings(max_examples=500, derandomize=True, database=None, deadline=None)
@given(st.text(YAML_CHARS, max_size=200))
def test_arbitrary_text(text: str) -> None:
    _check(text)
