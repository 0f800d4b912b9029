"""Every event kind an alert listens for is written by some step: a mapping that listens for a kind nothing
writes is an alert that can never fire (``boot-failed`` was one, while liveness wrote ``boot-timeout``).

Read from the source: the first argument of every event write (``store.event(...)``, ``repo.record_event``,
``append_event``) in orchestrator/, as a string, an ``EventKind`` member or a module constant naming one; a
kind chosen at run time from a module's table (liveness's ``_EVENTS``) counts every kind in that table."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from orchestrator.alerts.model import AlertKind
from orchestrator.daemon.alert_events import _DIRECT, EVENT_KINDS
from orchestrator.engine.events import EventKind
from orchestrator.store import open_store, repo

ROOT = Path(__file__).resolve().parents[1] / "orchestrator"
WRITERS = frozenset({"event", "record_event", "append_event"})


def _kind(node: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "EventKind":
        return EventKind[node.attr].value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def written_kinds() -> set[str]:
    kinds: set[str] = set()
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text())
        constants = {t.id: k for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                     if isinstance(t, ast.Name) and (k := _kind(n.value, {})) is not None}
        tables = {k for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
                  for v in n.value.values if (k := _kind(v, {})) is not None}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args:
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                if name in WRITERS:
                    # append_event(tx, kind, ...) and record_event(tx, kind, ...) take the session first.
                    arg = node.args[1] if name != "event" and len(node.args) > 1 else node.args[0]
                    found = _kind(arg, constants)
                    kinds |= {found} if found is not None else tables
    return kinds


def test_every_kind_an_alert_listens_for_is_written_somewhere() -> None:
    written = written_kinds()
    assert {"launched", "preempted", "job.status"} <= written        # the scan sees the writes it must see
    assert written >= EVENT_KINDS, sorted(EVENT_KINDS - written)


def test_the_liveness_budget_and_cap_kinds_alert() -> None:
    assert {EventKind.BOOT_TIMEOUT, EventKind.NODE_SILENT, EventKind.NODE_UNREACHABLE, EventKind.RELAUNCH_CAP,
            EventKind.BUDGET_STOP, EventKind.BUDGET_CAP_STOP} <= EVENT_KINDS


def _loose_kinds() -> list[str]:
    """Event writes in orchestrator/ whose kind is spelled as text (a literal or an f-string), not a member."""
    loose = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args:
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                if name in WRITERS:
                    arg = node.args[1] if name != "event" and len(node.args) > 1 else node.args[0]
                    if isinstance(arg, ast.JoinedStr) or (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                        loose.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(arg)}")
    return loose


def test_every_event_write_names_an_event_kind_member() -> None:
    assert not _loose_kinds()


def test_the_scan_finds_a_kind_spelled_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "m.py").write_text('def f(store, now):\n    store.event("made-up", "x", now)\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    [found] = _loose_kinds()
    assert found.endswith("m.py:2: 'made-up'")


def test_the_store_refuses_a_kind_that_is_not_a_member(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    try:
        with pytest.raises(ValueError, match="made-up"), store.transaction() as tx:
            repo.record_event(tx, "made-up", "x")      # type: ignore[arg-type]
        with store.transaction() as tx:
            repo.record_event(tx, "boot-timeout", "its text is the member")   # type: ignore[arg-type]
            assert [e.kind for e in repo.list_events(tx)] == ["boot-timeout"]
    finally:
        store.close()


def test_every_alert_kind_has_its_event() -> None:
    """Boot timeout, a silent node and an unreachable node each raise an alert of their own."""
    assert _DIRECT[EventKind.BOOT_TIMEOUT] is AlertKind.BOOT_FAILED
    assert _DIRECT[EventKind.NODE_SILENT] is AlertKind.NODE_SILENT
    assert _DIRECT[EventKind.NODE_UNREACHABLE] is AlertKind.NODE_UNREACHABLE
