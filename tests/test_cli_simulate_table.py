"""``orch simulate``'s tables fit 80 columns and never cut a policy's name (Rich cut ``uniform-progress`` to
``uniform-prog…`` in a table forced to 100 columns; the scenario table's headers showed ``uniform-…``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("on-demand", "greedy", "uniform-progress", "orch")


def simulate(tmp_path: Path, columns: int, *extra: str) -> str:
    for zone in ("a", "b"):
        (tmp_path / "tr").mkdir(exist_ok=True)
        (tmp_path / "tr" / f"{zone}.json").write_text(
            json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 1, 1, 0] * 40}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "COLUMNS": str(columns)}
    out = subprocess.run([sys.executable, "-m", "orchestrator", "simulate", "--traces", str(tmp_path / "tr"),
                          "--work", "10h", "--deadline", "15h", "--starts", "1", *extra],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("columns", [80, 120])
def test_every_table_fits_the_width_and_names_each_policy_in_full(tmp_path: Path, columns: int) -> None:
    text = simulate(tmp_path, columns, "--per-trace")
    assert all(len(line) <= columns for line in text.splitlines()), text
    assert "…" not in text, text
    # The summary's first column: each policy in full, one row each.
    first_words = [line.split()[0] for line in text.splitlines() if line.strip()]
    assert set(POLICIES) | {"optimum"} <= set(first_words), text
    # The scenario and per-set tables' headers: a hyphenated name over two lines, never cut.
    assert "uniform-" in text and "progress" in text


def test_the_summary_keeps_its_columns_without_the_optimum(tmp_path: Path) -> None:
    text = simulate(tmp_path, 80, "--no-optimum")
    header = next(line for line in text.splitlines() if line.split()[:1] == ["policy"])
    assert header.split() == ["policy", "cost", "worst", "score", "met", "finish", "h", "preempt", "switches"]
    assert "optimum" not in [line.split()[0] for line in text.splitlines() if line.strip()]
