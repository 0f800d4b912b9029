"""The engine stays simple enough to change: small modules, short functions, a passive sync that acts on no
cloud, and no decision taken from reason text (docs/engine.md). The CLI keeps the same size limits."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "orchestrator" / "engine"
MODULES = sorted(ENGINE.glob("*.py"))
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60
CLI = ROOT / "orchestrator" / "cli"
CLI_MODULES = sorted(CLI.glob("*.py"))


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def test_the_engine_has_modules_to_check() -> None:
    assert len(MODULES) >= 10 and ENGINE / "sync.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_engine_module_is_long(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.name}: {lines} lines (split it: at most {MAX_MODULE_LINES})"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_engine_function_is_long(path: Path) -> None:
    too_long = [f"{f.name} ({(f.end_lineno or f.lineno) - f.lineno + 1} lines, line {f.lineno})"
                for f in _functions(ast.parse(path.read_text()))
                if (f.end_lineno or f.lineno) - f.lineno + 1 > MAX_FUNCTION_LINES]
    assert not too_long, f"{path.name}: over {MAX_FUNCTION_LINES} lines: {', '.join(too_long)}"


def test_the_cli_has_modules_to_check() -> None:
    assert len(CLI_MODULES) >= 10 and CLI / "jobs.py" in CLI_MODULES


@pytest.mark.parametrize("path", CLI_MODULES, ids=lambda p: p.name)
def test_no_cli_module_is_long(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"cli/{path.name}: {lines} lines (split it: at most {MAX_MODULE_LINES})"


def _body_lines(f: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines from its first statement after the docstring: a Typer command's signature declares its
    options (two or three lines each) and is not logic to keep short."""
    body = f.body[1:] if len(f.body) > 1 and isinstance(f.body[0], ast.Expr) and isinstance(
        f.body[0].value, ast.Constant) and isinstance(f.body[0].value.value, str) else f.body
    return (f.end_lineno or f.lineno) - body[0].lineno + 1


@pytest.mark.parametrize("path", CLI_MODULES, ids=lambda p: p.name)
def test_no_cli_function_is_long(path: Path) -> None:
    too_long = [f"{f.name} ({_body_lines(f)} lines, line {f.lineno})" for f in _functions(ast.parse(path.read_text()))
                if _body_lines(f) > MAX_FUNCTION_LINES]
    assert not too_long, f"cli/{path.name}: a body over {MAX_FUNCTION_LINES} lines: {', '.join(too_long)}"


def test_the_cli_limit_counts_the_body_not_the_options() -> None:
    options = "".join(f"    opt{i}: int = 0,\n" for i in range(80))
    body = "".join(f"    x{i} = {i}\n" for i in range(61))
    command = ast.parse(f"def cmd(\n{options}) -> None:\n    \"\"\"Doc.\"\"\"\n    pass\n").body[0]
    long = ast.parse(f"def f() -> None:\n    \"\"\"Doc.\"\"\"\n{body}").body[0]
    assert isinstance(command, ast.FunctionDef) and isinstance(long, ast.FunctionDef)
    assert _body_lines(command) == 1 and _body_lines(long) == 61


def test_the_passive_sync_acts_on_no_cloud_and_starts_nothing() -> None:
    tree = ast.parse((ENGINE / "sync.py").read_text())
    acting = {"launch", "terminate", "stop", "start", "request_launch", "end_attempt", "request_termination"}
    calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
             for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert not calls & acting, f"sync.py calls {sorted(calls & acting)}"
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    steps = {f"orchestrator.engine.{m}" for m in ("launch", "launching", "ending", "gang", "recover", "teardown")}
    assert not imported & steps, f"sync.py imports {sorted(imported & steps)}"


#: String tests that would turn reason text back into state.
_TEXT_TESTS = {"startswith", "endswith", "find", "index", "count", "__contains__", "split", "partition"}


def decisions_from_reason(source: str) -> list[str]:
    """Comparisons of a ``reason`` with something else (``a.reason == …``, ``"x" in reason``) and string tests
    on one (``(a.reason or "").startswith(…)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops) or all(map(_mentions_reason, sides)):
                continue        # a None check, or "did the text change" (reason vs reason): not state
            if any(_mentions_reason(side) for side in sides):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _TEXT_TESTS
              and _mentions_reason(node.func.value)):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _mentions_reason(expr: ast.AST) -> bool:
    names = [n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(expr)
             if isinstance(n, ast.Attribute | ast.Name)]
    return any(name == "reason" or name.endswith("_reason") for name in names)


def test_the_engine_decides_nothing_from_reason_text() -> None:
    """Causes are EndCause values; an attempt's ``reason`` is human text, written for events and status, never
    read back (the engine, its store and its hooks)."""
    paths = [*MODULES, *sorted((ROOT / "orchestrator" / "store").glob("*.py")),
             *(ROOT / "orchestrator" / "runtime" / f
               for f in ("engine_hooks.py", "ssh_monitor.py", "transport_pool.py")),
             ROOT / "orchestrator" / "app" / "jobs.py"]
    found = [f"{path.relative_to(ROOT)} {hit}" for path in paths for hit in decisions_from_reason(path.read_text())]
    assert not found, "decided from reason text:\n" + "\n".join(found)


def test_the_old_reason_tests_are_gone_everywhere() -> None:
    """The two tests the engine used to drain and sweep by (issue 14's grep), anywhere under orchestrator/."""
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        text = path.read_text()
        assert 'startswith("notice' not in text and '== "idle: stopped"' not in text, path


def test_the_reason_check_sees_what_the_old_engine_did() -> None:
    old = ('''if inst.state is InstanceState.STOPPED and reason == "idle: stopped":\n    pass\n'''
           '''noticed = (prev.reason or "").startswith("notice")\n''')
    assert len(decisions_from_reason(old)) == 2
    assert decisions_from_reason("if reason is not None:\n    row.reason = reason\n") == []
