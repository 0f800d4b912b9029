"""The layer contract holds: ``lint-imports`` (import-linter, pyproject.toml ``[tool.importlinter]``) finds no
import back up a layer, no import cycle between sibling modules, no orchestrator import in providers/, and no
SQLAlchemy, SQLModel or prometheus_client import in the engine (README "Layout")."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> list[str]:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.fail("lint-imports not found: install the dev extra (import-linter)")
    return [exe, "--no-cache"]


def test_the_layer_contract_holds() -> None:
    done = subprocess.run(_lint_imports(), cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "broken" in done.stdout and " 0 broken" in done.stdout, done.stdout


def test_the_contract_breaks_on_an_import_back_up(tmp_path: Path) -> None:
    """The check can fail: a copy of the package where the money layer imports the CLI breaks the contract."""
    shutil.copytree(ROOT / "orchestrator", tmp_path / "orchestrator",
                    ignore=shutil.ignore_patterns("__pycache__", "templates", "static"))
    shutil.copytree(ROOT / "providers", tmp_path / "providers", ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    spend = tmp_path / "orchestrator" / "money" / "spend.py"
    spend.write_text(spend.read_text() + "\n\ndef _up() -> None:\n    import orchestrator.cli.main  # noqa: F401\n")
    done = subprocess.run(_lint_imports(), cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env={"PYTHONPATH": str(tmp_path), "PATH": ""})
    assert done.returncode != 0, done.stdout[-3000:]
    assert "orchestrator.money.spend -> orchestrator.cli.main" in done.stdout, done.stdout[-3000:]


def test_the_top_level_holds_at_most_six_loose_modules() -> None:
    """The folders tell the architecture (issue 32): a new module goes in the folder of its layer, not loose."""
    loose = sorted(p.name for p in (ROOT / "orchestrator").glob("*.py"))
    assert len(loose) <= 6, loose
