"""Every event kind an alert listens for is written by some step: a mapping that listens for a kind nothing
writes is an alert that can never fire (``boot-failed`` was one, while liveness wrote ``boot-timeout``).

Read from the source: the first argument of every event write (``store.event(...)``, ``repo.record_event``,
``repo._event``) in orchestrator/, as a string, an ``EventKind`` member or a module constant naming one; a
kind chosen at run time from a module's table (liveness's ``_EVENTS``) counts every kind in that table."""

from __future__ import annotations

import ast
from pathlib import Path

from orchestrator.alerts.mapping import EVENT_KINDS
from orchestrator.engine.events import EventKind

ROOT = Path(__file__).resolve().parents[1] / "orchestrator"
WRITERS = frozenset({"event", "record_event", "_event"})


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
                    # repo._event(tx, kind, ...) and record_event(tx, kind, ...) take the session first.
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
            EventKind.BUDGET_STOP} <= EVENT_KINDS
