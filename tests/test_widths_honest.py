"""Tables fit 80 columns and say a thing once (issue 31): `orch plan` printed 211-character lines and the same
note under each alternative; `orch providers` 195 characters, and never named the config file it read."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.main import app

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    done = CliRunner().invoke(app, list(args))
    assert done.exit_code in (0, 1), done.stderr
    return done.stdout


def test_plan_fits_80_columns_and_says_a_shared_note_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    text = _run("plan", str(ROOT / "examples" / "command.yaml"), str(ROOT / "examples" / "torchrun-ddp.yaml"),
                "--alternatives", "3", "--all-providers")
    assert max(len(line) for line in text.splitlines()) <= 80
    flat = " ".join(text.split())
    assert flat.count("spot: can be preempted, and with no checkpoint section") == 1     # eval-sweep's 4 offers
    assert "$17.30/h" in flat and "total $242.21" in flat                               # numbers whole


def test_providers_fits_80_columns_and_names_its_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    text = _run("providers")
    # Every line within 80 columns, but a word longer than that (this test's long temporary path) stays whole.
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in text.splitlines()), text
    flat = " ".join(text.split())
    assert "AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET" in flat        # a fix wraps, is never cut
    expected = tmp_path / "xdg-config" / "orch" / "config.yaml"                 # conftest's XDG_CONFIG_HOME
    assert f"config: no file at {expected}" in flat
    path = tmp_path / "mine.yaml"
    path.write_text("owner: alice\n")
    monkeypatch.setenv("ORCH_CONFIG", str(path))
    assert f"config: read {path}; owner: alice" in " ".join(_run("providers").split())
