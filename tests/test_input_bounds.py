"""Any input up to the caps is answered with bounded work and memory: a property over adversarial shapes.

No clock is read here (the machine may be loaded): memory is measured with tracemalloc (deterministic) and
work by counting the expensive operations (YAML values built, did-you-mean comparisons, errors mapped).
The wall-clock figures are in tests/bench/probe_hostile.py.
"""

from __future__ import annotations

import difflib
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import orchestrator.inputs.yamlread as yamlread
from orchestrator.manifest import ManifestError, load_manifests
from orchestrator.manifest.loader import MAX_ERRORS_PER_FILE

CAP = yamlread.MAX_BYTES
MEMORY_LIMIT = 200 * 1024 * 1024
HEAD = "apiVersion: orch/v1\nkind: Job\nname: big\nresources:\n  gpu: L4\nrun:\n  launcher: command\n  command: x\n"


def _fill(unit: Callable[[int], str], head: str = HEAD, tail: str = "") -> str:
    """``head`` then ``unit(i)`` for i = 0, 1, ... while the text stays within the cap."""
    parts, size, i = [head], len(head) + len(tail), 0
    while True:
        piece = unit(i)
        if size + len(piece.encode()) > CAP - 64:
            break
        parts.append(piece)
        size += len(piece.encode())
        i += 1
    return "".join(parts) + tail


SHAPES: dict[str, Callable[[], str]] = {
    "unknown keys": lambda: _fill(lambda i: f"k{i:07d}x: 1\n"),
    "unknown GPU names": lambda: _fill(lambda i: f", G{i}Z", head=HEAD.replace("gpu: L4", "gpu: [G"), tail="]\n"),
    "one huge GPU name": lambda: HEAD.replace("gpu: L4", "gpu: " + "A100" * ((CAP - 300) // 4)),
    "long flow list": lambda: _fill(lambda i: "1,", head=HEAD + "setup: [", tail="1]\n"),
    "many documents": lambda: _fill(lambda i: f"---\n{HEAD.replace('name: big', f'name: j{i}')}"),
    "empty documents": lambda: _fill(lambda i: "---\n"),
    "deep nesting": lambda: HEAD + "env: " + "[" * 5000 + "]" * 5000 + "\n",
    "alias fan-out": lambda: HEAD + "x0: &a0 [1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"x{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]\n" for i in range(1, 40)),
    "huge env": lambda: _fill(lambda i: f"  V{i}: {'v' * 60}\n", head=HEAD + "env:\n"),
    "unknown keys deep": lambda: _fill(lambda i: f"    q{i}: 1\n", head=HEAD + "policies:\n  idle:\n"),
    "credentials everywhere": lambda: _fill(lambda i: f"  - ghp_{i:036d}\n", head=HEAD + "setup:\n"),
}


class Counting(difflib.SequenceMatcher):
    made = 0

    def __init__(self, *args: object, **kwargs: object) -> None:
        Counting.made += 1
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_cap_sized_manifest_costs_bounded_work_and_memory(shape: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    text = SHAPES[shape]()
    assert len(text.encode()) <= CAP
    path = tmp_path / "big.yaml"
    path.write_text(text)
    built: list[int] = []
    real_count = yamlread._Composer.count

    def count(self: yamlread._Composer, n: int, mark: object) -> None:
        built.append(n)
        real_count(self, n, mark)

    monkeypatch.setattr(yamlread._Composer, "count", count)
    monkeypatch.setattr(difflib, "SequenceMatcher", Counting)
    Counting.made = 0
    tracemalloc.start()
    try:
        try:
            loaded = load_manifests([path])
            errors: list[ManifestError] = []
        except ManifestError as exc:
            loaded, errors = [], exc.errors
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_LIMIT, f"{shape}: {peak / 2**20:.0f} MB"
    # The last count is the one refused (an alias adds what it expands to without building it again).
    assert sum(built[:-1]) <= yamlread.MAX_NODES, f"{shape}: {sum(built)} values built"
    assert Counting.made <= 20 * 100, f"{shape}: {Counting.made} did-you-mean comparisons"   # 20 names x aliases
    assert len(errors) <= MAX_ERRORS_PER_FILE + 1
    assert all(len(e.format()) < 2000 for e in errors)
    assert loaded or errors


@settings(max_examples=10, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.sampled_from(sorted(SHAPES)), min_size=1, max_size=3), divisor=st.integers(1, 8))
def test_mixtures_of_shapes_stay_within_the_caps(names: list[str], divisor: int, tmp_path: Path) -> None:
    # Each shape cut to a share of the cap, one after another in one file: still bounded, still one answer.
    share = CAP // (len(names) * divisor)
    text = "".join(SHAPES[n]()[:share] + "\n---\n" for n in names)
    path = tmp_path / "mixed.yaml"
    path.write_text(text)
    tracemalloc.start()
    try:
        try:
            load_manifests([path])
        except ManifestError as exc:
            assert len(exc.errors) <= MAX_ERRORS_PER_FILE + 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_LIMIT
