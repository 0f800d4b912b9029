"""The agent's compaction and CPython 3.11's AST state shared by threads (orchestrator/runtime/boot.py,
``compacted_agent``): another thread's parse can make ours raise SystemError once; the build (one parse per agent
module) is tried again, and the startup renderer makes it when the engine is built, before any daemon thread
ticks."""

from __future__ import annotations

import pytest

from orchestrator.runtime import boot
from orchestrator.runtime.agent_app import agent_modules, agent_zipapp
from orchestrator.runtime.startup import ManifestStartupRenderer

MISMATCH = "AST constructor recursion depth mismatch (before=48, after=76)"
MODULES = len(agent_modules())     # one compaction per module per build


def _flaky_compact(monkeypatch: pytest.MonkeyPatch, failures: list[str]) -> list[int]:
    real, calls = boot._compact, []

    def compact(source: bytes) -> bytes:
        calls.append(1)
        if failures:
            raise SystemError(failures.pop(0))
        return real(source)

    monkeypatch.setattr(boot, "_compact", compact)
    monkeypatch.setattr(boot, "_compact_agent_bytes", None)
    return calls


def test_a_tripped_parse_is_tried_again_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = agent_zipapp(boot._compact)
    calls = _flaky_compact(monkeypatch, [MISMATCH, MISMATCH])       # each failed build stops at its first module
    made = boot.compacted_agent()
    assert made == expected and len(calls) == 2 + MODULES
    assert boot.compacted_agent() is made and len(calls) == 2 + MODULES       # once per process


def test_it_gives_up_after_its_tries_and_other_system_errors_are_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    _flaky_compact(monkeypatch, [MISMATCH] * boot._COMPACT_TRIES)
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        boot.compacted_agent()
    calls = _flaky_compact(monkeypatch, ["something else"])
    with pytest.raises(SystemError, match="something else"):
        boot.compacted_agent()
    assert len(calls) == 1


def test_the_startup_renderer_makes_it_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _flaky_compact(monkeypatch, [])
    ManifestStartupRenderer()
    assert boot._compact_agent_bytes is not None and len(calls) == MODULES
