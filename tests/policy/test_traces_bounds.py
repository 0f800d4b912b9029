"""Traces that would make ``orch simulate`` hang, recurse or eat memory are refused with one line: ticks too
close or too coarse, too many of them, JSON nested too deep, files that are not regular or too large."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

import orchestrator.policy.traces as traces
from orchestrator.cli.main import app
from orchestrator.policy.traces import TraceError, load_trace


def write(path: Path, data: list[int], gap: float) -> Path:
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data}))
    return path


def simulate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["simulate", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("gap", [0.25, 1e-12, 8 * 86400])
def test_ticks_closer_than_a_second_or_further_than_a_week_are_refused(gap: float, tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="gap_seconds is"):
        load_trace(write(tmp_path / "z.json", [1, 0, 1], gap))


def test_json_nested_past_the_recursion_limit_is_a_trace_error(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"metadata": {"gap_seconds": 60}, "data": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(TraceError, match="nested too deeply"):
        load_trace(deep)


def test_too_many_ticks_or_bytes_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(traces, "MAX_TICKS", 100)
    with pytest.raises(TraceError, match="101 ticks is more than a trace may hold"):
        load_trace(write(tmp_path / "long.json", [1] * 101, 60))
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 200)
    with pytest.raises(TraceError, match="too large for a trace"):
        load_trace(write(tmp_path / "wide.json", [1] * 90, 60))


def test_a_fifo_trace_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "zone.json"
    os.mkfifo(fifo)
    errors: list[TraceError] = []

    def read() -> None:
        try:
            load_trace(fifo)
        except TraceError as exc:
            errors.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=60)
    if reader.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO trace blocked")
    assert "not a regular file (a FIFO)" in str(errors[0])


def test_a_window_of_too_many_ticks_is_refused_before_simulating(tmp_path: Path) -> None:
    trace = write(tmp_path / "fine.json", [1] * 50, 2)        # 2 s ticks: a 150 h deadline is 270,000 of them
    code, out = simulate("--traces", str(trace), "--work", "100h", "--deadline", "150h", "--no-optimum")
    assert code == 2 and "270000 ticks" in out and "coarser trace" in out


def test_ticks_far_coarser_than_the_slack_are_refused(tmp_path: Path) -> None:
    trace = write(tmp_path / "weekly.json", [1, 1, 0], 7 * 86400)
    code, out = simulate("--traces", str(trace), "--work", "1h", "--deadline", "78m", "--overhead", "1m")
    assert code == 2 and "too coarse" in out


def test_a_credential_in_a_trace_or_a_flag_is_not_echoed(tmp_path: Path) -> None:
    token = "gho_9f8E7d6C5b4A3z2Y1x0W9v8U7t6S5r4Q3p2O"
    bad = tmp_path / "z.json"
    bad.write_text(json.dumps({"metadata": {"gap_seconds": token}, "data": [1]}))
    code, out = simulate("--traces", str(bad))
    assert code == 2 and "gap_seconds" in out and token not in out
    good = write(tmp_path / "ok.json", [1, 1, 0], 600)
    code, out = simulate("--traces", str(good), "--deadline", token)
    assert code == 2 and "not a duration" in out and token not in out
