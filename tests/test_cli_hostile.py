"""Misuse of the command line: every number and name is checked at the edge, failures are one line with
exit 1 or 2, a value that looks like a credential is never printed, and ``--json`` is always JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app

TOKEN = "gho_9f8E7d6C5b4A3z2Y1x0W9v8U7t6S5r4Q3p2O"
MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: edge
resources:
  gpu: L4
run:
  launcher: command
  command: nvidia-smi
"""


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stdout, result.stderr


def one_line_error(code: int, out: str, err: str, expected: int = 2) -> str:
    assert code == expected, (out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 6, err
    return err


@pytest.mark.parametrize(("args", "message"), [
    (["quote", "--max-price", "NaN"], "--max-price must be a finite number"),
    (["quote", "--min-vram=-inf"], "--min-vram must be a finite number"),
    (["events", "--poll", "inf"], "--poll must be a finite number"),
    (["events", "--follow", "--max-wait", "nan"], "--max-wait must be a finite number"),
    (["events", "--follow", "--poll", "1e9"], "--poll must be at most 3600"),
    (["down", "--all", "--yes", "--timeout", "1e309"], "--timeout must be a finite number"),
    (["down", "--all", "--yes", "--poll=-0.5"], "--poll must be at least 0.05"),
    (["daemon", "--interval", "0.01"], "--interval must be at least 0.05"),
    (["daemon", "--interval", "NaN"], "--interval must be a finite number"),
    (["daemon", "--metrics-port", "65536"], "65536"),
    (["daemon", "--metrics-port", "-1"], "-1"),
    (["tick", "--max-ticks", "0"], "0"),
    (["simulate", "--traces", "x.json", "--spot-price", "inf"], "finite"),
])
def test_numbers_are_checked_at_the_edge(args: list[str], message: str) -> None:
    err = one_line_error(*run(*args))
    assert message in err


def test_a_metrics_address_that_cannot_be_bound_is_one_clear_line() -> None:
    err = one_line_error(*run("daemon", "--metrics-port", "0", "--metrics-host", "203.0.113.9"))
    assert "cannot serve metrics on '203.0.113.9'" in err and "--metrics-host" in err


@pytest.mark.parametrize("command", [["validate"], ["render"], ["plan"], ["simulate", "--traces"]])
def test_a_file_name_too_long_is_one_line(command: list[str], tmp_path: Path) -> None:
    long = str(tmp_path / ("m" * 300 + ".yaml"))
    code, out, err = run(*command, long)
    one_line_error(code, out, err)
    assert "file name too long" in err


def test_click_usage_errors_never_repeat_a_credential() -> None:
    code, out, err = run("quote", "--count", TOKEN)
    assert code == 2 and TOKEN not in out + err and "<redacted: a GitHub token>" in err
    code, out, err = run("status", "--json", f"--{TOKEN}")
    assert code == 2 and TOKEN not in out + err


def test_a_bug_is_one_redacted_line_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestrator.offers.quote as quote

    def broken(*_a: object, **_k: object) -> None:
        raise RuntimeError(f"unexpected reply carrying {TOKEN}")

    monkeypatch.setattr(quote, "quote", broken)
    code, _out, err = run("quote", "--gpu", "L4")
    assert code == 1 and err.startswith("error: internal error: RuntimeError: unexpected reply carrying")
    assert TOKEN not in err and "Traceback" not in err and "ORCH_DEBUG=1" in err


def test_json_output_never_holds_nan_or_infinity(tmp_path: Path) -> None:
    assert dumps({"a": float("nan"), "b": [1.5, float("-inf")], "c": {"d": float("inf")}}) == \
        '{"a": null, "b": [1.5, null], "c": {"d": null}}'
    job = tmp_path / "edge.yaml"
    job.write_text(MANIFEST)
    for args in (["quote", "--gpu", "L4", "--json"], ["plan", str(job), "--json"], ["status", "--json"],
                 ["providers", "--json"]):
        code, out, _ = run(*args)
        assert code in (0, 1)
        json.loads(out, parse_constant=_not_json)


def _not_json(constant: str) -> None:
    pytest.fail(f"{constant} in --json output")


def test_a_config_that_is_not_a_regular_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)   # no writer: reading it naively would block forever
    for config in ("/dev/zero", str(fifo), str(tmp_path)):
        monkeypatch.setenv("ORCH_CONFIG", config)
        err = one_line_error(*run("providers"))
        assert "cannot read config: not a regular file" in err
