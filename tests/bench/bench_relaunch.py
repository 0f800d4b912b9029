#!/usr/bin/env python3
"""Benchmark: a spot notice to the replacement's job running, over the e2e world (real SSH, agents, rclone).

    python tests/bench/bench_relaunch.py [--runs 5]

Runs ``tests/e2e/test_preemption.py::test_spot_notice_checkpoints_now_and_resumes_on_b`` ``--runs`` times, one
after the other, reads the figure each run prints (``notice -> running on B``) and its timeline (when A's agent
heard the notice, committed its checkpoint, when the engine asked B to start, when B's agent was up), and prints
one line: the median, the range, and the median of each step. Target: median <= 2 s. The test's notice phase
ticks at the daemon's cadence (a tick when the wake watch says one is due, else every 15 s), so the figure is
the daemon's path. Not a test: it asserts nothing; it reports (a run that fails is reported as such).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST = "tests/e2e/test_preemption.py::test_spot_notice_checkpoints_now_and_resumes_on_b"
_RUNNING = re.compile(r"notice -> running on B: ([0-9.]+)s")
_MARK = re.compile(r"([a-z-]+)=([0-9.]+)s")


def one_run() -> tuple[float | None, dict[str, float]]:
    """One e2e run: its notice-to-running figure (None when it failed) and its timeline marks."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-s", "-p", "no:cacheprovider", TEST],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=False).stdout
    found = _RUNNING.search(out)
    timeline = next((line for line in out.splitlines() if line.startswith("[e2e notice timeline]")), "")
    return (float(found.group(1)) if found else None), {k: float(v) for k, v in _MARK.findall(timeline)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    figures: list[float] = []
    marks: dict[str, list[float]] = {}
    failed = 0
    for _ in range(args.runs):
        figure, timeline = one_run()
        if figure is None:
            failed += 1
            continue
        figures.append(figure)
        for k, v in timeline.items():
            marks.setdefault(k, []).append(v)
    if not figures:
        print(f"relaunch: no run passed ({failed} failed)")
        return
    steps = " ".join(f"{k}={statistics.median(v):.2f}s" for k, v in sorted(marks.items(),
                                                                       key=lambda kv: statistics.median(kv[1])))
    print(f"relaunch (notice -> job running on B): median {statistics.median(figures):.2f}s over {len(figures)} "
          f"runs (min {min(figures):.2f}s, max {max(figures):.2f}s, {failed} failed); median steps: {steps}")


if __name__ == "__main__":
    main()
