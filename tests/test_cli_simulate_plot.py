"""``orch simulate --plot PATH``: a path matplotlib cannot write is refused before the simulation runs, as one
line and exit 2 (it was an internal error, a failure after the whole run, or an image written elsewhere)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _simulate(tmp_path: Path, plot: Path) -> subprocess.CompletedProcess[str]:
    trace = tmp_path / "z0.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 1, 0, 1] * 30}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "orchestrator", "simulate", "--traces", str(trace), "--work", "10h",
                           "--deadline", "15h", "--starts", "1", "--policy", "greedy", "--no-optimum", "--plot",
                           str(plot)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


@pytest.mark.parametrize(("name", "message"), [
    ("cost.txt", "name a .png, .svg or .pdf file"),      # was: internal error: ValueError: Format 'txt' ...
    ("cost", "name a .png, .svg or .pdf file"),          # was: wrote cost.png, said "plot: cost"
    (".", "is a directory"),                             # was: wrote <parent>/<dir>.png, exit 0
    ("missing/cost.png", "no such directory"),           # was: refused only after the whole simulation
])
def test_a_plot_path_matplotlib_cannot_write_is_refused_before_the_run(tmp_path: Path, name: str,
                                                                       message: str) -> None:
    pytest.importorskip("matplotlib")
    out = _simulate(tmp_path, tmp_path / name)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert message in out.stderr and "Traceback" not in out.stderr and "internal error" not in out.stderr
    assert out.stdout == ""          # nothing simulated: the table would be printed first
    assert not list(tmp_path.glob("*.png"))
