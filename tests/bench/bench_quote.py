#!/usr/bin/env python3
"""Benchmark: `orch quote --gpu A100-80G --count 4 --json` against `python -c pass`, in one run.

    python tests/bench/bench_quote.py [--rounds 20]

Runs the two commands alternately (so machine noise hits both alike), then prints each median wall
time, their ratio and the quote's peak RSS. Target: ratio <= 6, peak RSS <= 80 MB. Not a test: it
asserts nothing; it reports.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def orch_command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m orchestrator``."""
    script = Path(sys.executable).with_name("orch")
    if script.exists():
        return [str(script)]
    found = shutil.which("orch")
    return [found] if found else [sys.executable, "-m", "orchestrator"]


def run_once(argv: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one child process."""
    start = time.perf_counter()
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
    pid = os.posix_spawn(argv[0], argv, {**os.environ, "PYTHONPATH": path},
                         file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} exited {os.waitstatus_to_exitcode(status)}")
    return elapsed, usage.ru_maxrss


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    quote = [*orch_command(), "quote", "--gpu", "A100-80G", "--count", "4", "--json"]
    baseline = [sys.executable, "-c", "pass"]
    run_once(quote), run_once(baseline)  # warm the page cache and .pyc files
    q_times, b_times, q_rss = [], [], []
    for _ in range(args.rounds):
        t, rss = run_once(quote)
        q_times.append(t)
        q_rss.append(rss)
        b_times.append(run_once(baseline)[0])
    q_med, b_med = statistics.median(q_times), statistics.median(b_times)
    print(f"command:           {' '.join(quote)}")
    print(f"rounds:            {args.rounds} (alternating)")
    print(f"orch quote median: {q_med * 1000:.1f} ms")
    print(f"python -c pass:    {b_med * 1000:.1f} ms")
    print(f"ratio:             {q_med / b_med:.2f}  (target <= 6)")
    print(f"peak RSS (quote):  {max(q_rss) / 1024:.1f} MB  (target <= 80)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
