"""Trace files and zone sets, and ``orch simulate`` as a user runs it (a real process, exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.simulate import DurationError, parse_duration_h
from orchestrator.policy.traces import TraceError, discover, load_trace, zone_set

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, data: list[int], gap: float = 600, **extra: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data, **extra}))
    return path


def orch(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


def test_trace_values_above_zero_are_available(tmp_path: Path) -> None:
    t = load_trace(write(tmp_path / "a.json", [0, 1, 3, 0], gap=195))
    assert t.available == (False, True, True, False) and t.gap_h == pytest.approx(195 / 3600)
    assert t.prices is None


def test_file_prices_are_used_only_against_an_on_demand_price(tmp_path: Path) -> None:
    p = write(tmp_path / "a.json", [1, 1], prices=[0.9, 1.8])
    assert load_trace(p).prices is None
    assert load_trace(p, on_demand_price=3.0).prices == pytest.approx((0.3, 0.6))


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "not valid JSON"),
    ('{"data": [1]}', "expected"),
    ('{"metadata": {"gap_seconds": 0}, "data": [1]}', "gap_seconds must be a positive number"),
    ('{"metadata": {"gap_seconds": 60}, "data": []}', "non-empty list"),
    ('{"metadata": {"gap_seconds": 60}, "data": [1, "x"]}', r"data\[1\]"),
    ('{"metadata": {"gap_seconds": 60}, "data": [1, true]}', r"data\[1\]"),
    ("[1, 2]", "expected"),
])
def test_malformed_traces_raise_a_typed_error_naming_the_file(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(TraceError, match=message) as info:
        load_trace(p)
    assert "bad.json" in str(info.value)


def test_missing_file_and_mixed_gaps(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "nope.json")
    a = load_trace(write(tmp_path / "a.json", [1, 1, 1], gap=60))
    b = load_trace(write(tmp_path / "b.json", [1, 0], gap=120))
    with pytest.raises(TraceError, match="different gap_seconds"):
        zone_set("set", [a, b])


def test_zone_sets_are_cut_to_the_shortest_and_directories_make_both_kinds(tmp_path: Path) -> None:
    write(tmp_path / "r1" / "a.json", [1, 1, 1, 1])
    write(tmp_path / "r1" / "b.json", [0, 1])
    write(tmp_path / "r2" / "c.json", [1])
    sets = discover([tmp_path])
    assert [s.name for s in sets] == ["r1/a", "r1/b", "r1/*", "r2/c"]
    multi = sets[2]
    assert len(multi.zones) == 2 and multi.ticks == 2
    assert [s.name for s in discover([tmp_path], single=False)] == ["r1/*"]
    with pytest.raises(TraceError, match="no such file or directory"):
        discover([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match=r"no \*\.json"):
        discover([tmp_path / "empty"])


@pytest.mark.parametrize(("text", "hours"), [("48h", 48), ("12m", 0.2), ("0.2h", 0.2), ("720s", 0.2), ("2d", 48)])
def test_durations(text: str, hours: float) -> None:
    assert parse_duration_h("--x", text) == pytest.approx(hours)


def test_bad_duration() -> None:
    with pytest.raises(DurationError, match="not a duration"):
        parse_duration_h("--work", "forty")


def test_a_bare_number_needs_a_unit() -> None:
    """Issue 31: everywhere else a bare number is seconds; here it was hours. Now it says which it needs."""
    with pytest.raises(DurationError, match=r"--work: '?3'? needs a unit \(3s, 3m, 3h or 3d\)"):
        parse_duration_h("--work", "3")


def _trace_dir(tmp_path: Path) -> Path:
    # 10-minute ticks, 5 days: spot up 5 h, down 1 h, over and over, in two zones shifted by 3 h.
    pattern = ([1] * 30 + [0] * 6) * 20
    write(tmp_path / "set" / "z0.json", pattern)
    write(tmp_path / "set" / "z1.json", pattern[18:] + pattern[:18])
    return tmp_path / "set"


def test_simulate_json_has_every_policy_and_the_optimum_below_them(tmp_path: Path) -> None:
    out = orch("simulate", "--traces", str(_trace_dir(tmp_path)), "--work", "10h", "--deadline", "15h",
               "--overhead", "12m", "--starts", "3", "--json", "--workers", "1")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    summary = {row["policy"]: row for row in doc["summary"]}
    assert list(summary) == ["on-demand", "greedy", "uniform-progress", "orch", "optimum"]
    assert summary["on-demand"]["mean_cost"] == pytest.approx(1.0)
    assert all(row["deadline_met_pct"] == 100.0 for row in doc["summary"])
    assert all(summary["optimum"]["mean_cost"] <= row["mean_cost"] + 1e-9 for row in doc["summary"])
    assert [z["zone_set"] for z in doc["zone_sets"]] == ["set/z0", "set/z1", "set/*"]
    assert doc["problem"] == {"work_h": 10.0, "deadline_h": 15.0, "overhead_h": 0.2, "spot_price": 0.3}


def test_simulate_table(tmp_path: Path) -> None:
    out = orch("simulate", "--traces", str(_trace_dir(tmp_path) / "z0.json"), "--work", "10h", "--deadline",
               "15h", "--policy", "up", "--policy", "orch", "--starts", "2", "--per-trace")
    assert out.returncode == 0, out.stderr
    assert "uniform-progress" in out.stdout and "optimum" in out.stdout and "greedy" not in out.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--traces", "MISSING"], "no such file or directory"),
    (["--deadline", "40h"], "must be longer than the work"),
    (["--spot-price", "-0.5"], "must not be negative"),
    (["--overhead", "80h", "--deadline", "72h"], "must be shorter than the deadline"),
    (["--work", "two days"], "not a duration"),
    (["--policy", "cheapest"], "unknown policy"),
    (["--starts", "0"], "--starts"),
])
def test_simulate_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    traces = str(_trace_dir(tmp_path))
    if args[:2] == ["--traces", "MISSING"]:
        args = ["--traces", str(tmp_path / "missing")]
    else:
        args = ["--traces", traces, *args]
    out = orch("simulate", *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert message in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.startswith("error: ") and len(out.stderr.strip().splitlines()) == 1


def test_simulate_malformed_trace_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text("{oops")
    out = orch("simulate", "--traces", str(bad))
    assert out.returncode == 2 and "broken.json" in out.stderr and "not valid JSON" in out.stderr


def test_simulate_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "out.png"
    out = orch("simulate", "--traces", str(_trace_dir(tmp_path) / "z0.json"), "--work", "10h", "--deadline",
               "15h", "--starts", "2", "--plot", str(png))
    assert out.returncode == 0, out.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_module_imports_nothing_heavy() -> None:
    code = ("import sys, orchestrator.cli.main; "
            "print(any(m.startswith(('numpy', 'matplotlib', 'orchestrator.policy')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_simulate_keeps_the_optimum_in_its_cache_unless_told_not_to(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    args = ("simulate", "--traces", str(_trace_dir(tmp_path) / "z0.json"), "--work", "10h", "--deadline", "15h",
            "--policy", "up", "--starts", "2", "--json", "--workers", "1")
    monkeypatch.setenv("ORCH_CACHE_DIR", str(tmp_path / "off"))
    off = orch(*args, "--no-optimum-cache")
    assert off.returncode == 0, off.stderr
    assert not (tmp_path / "off").exists()
    monkeypatch.setenv("ORCH_CACHE_DIR", str(tmp_path / "on"))
    first, again = orch(*args), orch(*args)
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert len(list((tmp_path / "on" / "optimum").glob("*.json"))) == 1
    optimum_of = [next(r for r in json.loads(o.stdout)["summary"] if r["policy"] == "optimum")["mean_cost"]
                  for o in (off, first, again)]
    assert optimum_of[0] == optimum_of[1] == optimum_of[2]
