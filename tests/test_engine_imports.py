"""The engine imports without SQLAlchemy, SQLModel or prometheus_client: its states are its own
(orchestrator/engine/states.py), its SQL port lives in orchestrator/store/, and its metrics are a protocol."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import orchestrator.engine

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("sqlalchemy", "sqlmodel", "prometheus_client")

_SCRIPT = textwrap.dedent("""
    import importlib, sys
    BLOCKED = {blocked!r}

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError("blocked: " + name)
            return None

    sys.meta_path.insert(0, Blocker())
    for name in {modules!r}:
        importlib.import_module(name)
    print("imported", len({modules!r}))
""")


def _run(modules: list[str]) -> subprocess.CompletedProcess[str]:
    script = _SCRIPT.format(blocked=set(BLOCKED), modules=modules)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def engine_modules() -> list[str]:
    return ["orchestrator.engine"] + [f"orchestrator.engine.{m.name}"
                                      for m in pkgutil.iter_modules(orchestrator.engine.__path__)]


def test_the_engine_and_every_submodule_import_with_the_database_and_metrics_libraries_blocked() -> None:
    modules = engine_modules()
    assert "orchestrator.engine.reconciler" in modules and "orchestrator.engine.states" in modules
    done = _run(modules)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"imported {len(modules)}" in done.stdout


def test_the_blocker_does_block() -> None:
    """The store needs SQLAlchemy: with it blocked it fails to import, so the test above can fail."""
    done = _run(["orchestrator.store.models"])
    assert done.returncode != 0 and "ImportError: blocked: sqlalchemy" in done.stderr
