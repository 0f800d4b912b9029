"""Every command answers one store problem with one exit code (docs/cli.md, "Exit codes"): a database URL that
is wrong as written (ORCH_DATABASE_URL or --url) is bad input, 2; a URL that is right but cannot be used (the
server does not answer, the schema needs `orch db upgrade`) is an operation that failed, 1."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.main import app
from tests.test_cli_apply import MANIFEST

#: Commands that open the store, each as a user would run it (the manifest path is filled in).
COMMANDS = (["status"], ["status", "--json"], ["events"], ["apply", "{manifest}", "--no-launch"],
            ["down", "--all", "--yes"], ["logs", "train"], ["db", "current"], ["db", "current", "--json"])
#: Wrong as written: another database, a URL that is no URL, an in-memory SQLite store, another driver.
BAD_URLS = ("mysql://u:secret@h/d", "not a url", "sqlite://", "postgresql+psycopg2://u@127.0.0.1:1/x")


def _run(args: list[str], manifest: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, [a.format(manifest=manifest) for a in args], catch_exceptions=False)
    return result.exit_code, result.stderr


@pytest.fixture()
def manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_CONFIG", str(tmp_path / "no-config.yaml"))
    path = tmp_path / "train.yaml"
    path.write_text(MANIFEST.format(name="train"))
    return path


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_database_url_wrong_as_written_is_bad_input_for_every_command(url: str, manifest: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_DATABASE_URL", url)
    for args in COMMANDS:
        code, err = _run(args, manifest)
        assert code == 2 and err.startswith("error: ") and "secret" not in err, (args, code, err)
    assert _run(["db", "upgrade"], manifest)[0] == 2


def test_a_server_that_does_not_answer_is_a_failed_operation_for_every_command(
        manifest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_DATABASE_URL", "postgresql+psycopg://u@127.0.0.1:1/x?connect_timeout=5")
    for args in COMMANDS:
        code, err = _run(args, manifest)
        assert code == 1 and err.startswith("error: ") and "Traceback" not in err, (args, code, err)
        # The driver's words, not a class name: "...: connection failed: ... Connection refused"
        assert "OperationalError" not in err and "Connection refused" in err, (args, err)
    code, err = _run(["db", "upgrade"], manifest)
    assert code == 1 and "OperationalError" not in err and "Connection refused" in err, err


def test_a_schema_to_upgrade_is_a_failed_operation_not_bad_input(tmp_path: Path, manifest: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    assert _run(["db", "upgrade", "--url", url, "0001"], manifest)[0] == 0
    monkeypatch.setenv("ORCH_DATABASE_URL", url)
    for args in COMMANDS[:6]:
        code, err = _run(args, manifest)
        assert code == 1 and "run `orch db upgrade`" in err, (args, code, err)
    assert _run(["db", "current"], manifest)[0] == 0     # it says where the schema is: no failure
