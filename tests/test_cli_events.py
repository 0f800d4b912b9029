"""``orch events`` in 80 columns: a long message (a cloud's error) goes on in indented lines, never cut and
never past column 80; ``--json`` carries each event whole on one line, as before."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.events import CONTINUATION
from orchestrator.cli.main import app
from orchestrator.engine.events import EventKind
from tests.support.manifests import store_unchecked_job

T0 = datetime(2026, 12, 1, 12, 0, 10, tzinfo=UTC)
JOB = "llama-70b-finetune-long-context"          # longer than its 16-column slot: pushes the message right
LONG = ("aws p4d.24xlarge us-east-1: InsufficientInstanceCapacity: We currently do not have sufficient "
        "p4d.24xlarge capacity in the Availability Zone you requested (us-east-1a). Our system will be working "
        "on provisioning additional capacity.")


@pytest.fixture()
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text("owner: tester\n")
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")   # XDG dirs: conftest's
    from orchestrator.store import open_store, repo

    store = open_store()
    try:
        with store.transaction() as tx:
            job = store_unchecked_job(tx, JOB, {"name": JOB}, "h", now=T0).id
            for minute in (0, 1, 2):                 # a repeated condition: one event, its line ends (x3, last ...)
                repo.record_event(tx, EventKind.LAUNCH_REFUSED, LONG, job_id=job, ts=T0 + timedelta(minutes=minute))
            repo.record_event(tx, EventKind.LAUNCHED, "short", job_id=job, ts=T0 + timedelta(minutes=3))
    finally:
        store.close()
    return tmp_path


def _run(*args: str) -> str:
    result = CliRunner().invoke(app, ["events", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_a_long_event_message_wraps_within_80_columns(cli_env: Path) -> None:
    lines = _run().splitlines()
    assert max(map(len, lines)) <= 80, "\n".join(lines)
    starts = [n for n, line in enumerate(lines) if line.startswith("2026-")]
    assert len(starts) == 3 and starts[0] == 0                      # three events, each begins with its date
    assert " ".join(lines[:starts[1]]).split()[2:] == [JOB, "job.created", "job", JOB, "created"]
    refused = lines[starts[1]:starts[2]]
    assert len(refused) > 1 and all(line.startswith(CONTINUATION) and line[len(CONTINUATION)] != " "
                                    for line in refused[1:])
    # nothing lost: the words, in order, are the event's whole line
    assert " ".join(" ".join(refused).split()) == \
        f"2026-12-01 12:00:10 {JOB} launch-refused {LONG} (x3, last 2026-12-01 12:02:10)"
    assert lines[starts[2]:] == [f"2026-12-01 12:03:10 {JOB} launched         short"]


def test_json_keeps_each_event_whole_on_one_line(cli_env: Path) -> None:
    docs = [json.loads(line) for line in _run("--json").splitlines()]
    assert [d["message"] for d in docs[1:]] == [LONG, "short"] and docs[1]["count"] == 3


def test_an_empty_store_says_no_events_as_status_says_no_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It printed nothing; --json still prints JSON lines, none."""
    config = tmp_path / "config.yaml"
    config.write_text("owner: tester\n")
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")
    status = CliRunner().invoke(app, ["status"], catch_exceptions=False)
    assert status.exit_code == 0 and status.stdout.startswith("no jobs (")
    assert _run() == "no events (apply some manifests: orch apply PATH)\n"
    assert _run("--json") == ""
