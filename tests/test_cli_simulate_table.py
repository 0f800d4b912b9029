"""``orch simulate``'s summary table names each policy in full (Rich cut ``uniform-progress`` to
``uniform-prog…``, even at the table's 100 columns)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_policy_names_are_never_cut(tmp_path: Path) -> None:
    for zone in ("a", "b"):
        (tmp_path / "tr").mkdir(exist_ok=True)
        (tmp_path / "tr" / f"{zone}.json").write_text(
            json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 1, 1, 0] * 40}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache"), "COLUMNS": "80"}
    out = subprocess.run([sys.executable, "-m", "orchestrator", "simulate", "--traces", str(tmp_path / "tr"),
                          "--work", "10h", "--deadline", "15h", "--starts", "1", "--no-optimum"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    first_cells = [line.split("│")[1].strip() for line in out.stdout.splitlines() if line.startswith("│")]
    assert {"on-demand", "greedy", "uniform-progress", "orch"} <= set(first_cells), first_cells
