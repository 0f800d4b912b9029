#!/usr/bin/env python3
"""Benchmark: every policy and the offline optimum on the whole public trace set, in several settings.

    python tests/bench/bench_simulate.py TRACE_DIR [--starts 12] [--workers N]

TRACE_DIR is e.g. ../shared/reference/spot-traces (never committed here). Single-zone (each file) and
multi-zone (each directory as one zone set) cases, C=48 h, k=0.3, and five (deadline, overhead) settings.
Per setting and policy: mean and worst normalized cost, deadlines met, gap to the optimum; then orch against
Uniform Progress per zone set (mean over its starts) and per single run; then Uniform Progress and orch again
with a preemption notice one tick ahead. Also times `orch simulate` on the
whole set with its defaults, against `python -c pass` in the same process tree. Reports; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.policy.evaluate import all_results, evaluate, summarize  # noqa: E402
from orchestrator.policy.model import ProblemSpec  # noqa: E402
from orchestrator.policy.registry import POLICY_NAMES  # noqa: E402
from orchestrator.policy.traces import discover  # noqa: E402

SETTINGS = [(72.0, 0.2), (60.0, 0.2), (96.0, 0.2), (72.0, 0.05), (72.0, 0.5)]


def versus_up(cases: list) -> str:
    """orch against Uniform Progress: per zone set (mean over its starts) and per single run."""
    dearer: list[str] = []
    cheaper = runs = runs_dearer = runs_cheaper = 0
    for c in cases:
        up, mine = c.results("uniform-progress"), c.results("orch")
        runs += len(up)
        runs_dearer += sum(m.normalized_cost > u.normalized_cost + 1e-9 for m, u in zip(mine, up, strict=True))
        runs_cheaper += sum(m.normalized_cost < u.normalized_cost - 1e-9 for m, u in zip(mine, up, strict=True))
        d = statistics.fmean(m.normalized_cost for m in mine) - statistics.fmean(u.normalized_cost for u in up)
        if d > 1e-9:
            dearer.append(f"{c.zone_set} +{d:.4f}")
        elif d < -1e-9:
            cheaper += 1
    line = (f"orch vs UP: cheaper on {cheaper}, dearer on {len(dearer)} of {len(cases)} zone sets; "
            f"runs cheaper {runs_cheaper}, dearer {runs_dearer} of {runs}")
    return "\n".join([line, *(f"{'':<18}dearer: {w}" for w in dearer)])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("traces", type=Path)
    parser.add_argument("--starts", type=int, default=12)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    sets = discover([args.traces])
    print(f"{len(sets)} zone sets ({sum(len(s.zones) == 1 for s in sets)} single-zone), {args.starts} starts each")
    print(f"{'setting':<16}{'policy':<18}{'mean':>7}{'worst':>7}{'met%':>7}{'gap-opt':>9}")
    for deadline, overhead in SETTINGS:
        spec = ProblemSpec(48.0, deadline, overhead, 0.3)
        t0 = time.perf_counter()
        cases = evaluate(spec, sets, POLICY_NAMES, args.starts, workers=args.workers)
        wall = time.perf_counter() - t0
        opt = [v for c in cases for v in (c.optimum or ()) if v is not None]
        opt_mean = statistics.fmean(opt)
        label = f"D={deadline:g} d={overhead:g}"
        for name in POLICY_NAMES:
            s = summarize(name, all_results(cases, name))
            print(f"{label:<16}{name:<18}{s.mean_cost:7.3f}{s.worst_cost:7.3f}{s.met_pct:7.1f}"
                  f"{s.mean_cost - opt_mean:9.3f}")
            label = ""
        print(f"{'':<16}{'optimum':<18}{opt_mean:7.3f}{max(opt):7.3f}{'':>7}{0:9.3f}")
        print(f"{'':<16}{versus_up(cases)}; {wall:.1f} s")
        # With a preemption notice one tick ahead (the optimum and on-demand do not change with it).
        t0 = time.perf_counter()
        noticed = evaluate(spec, sets, ("uniform-progress", "orch"), args.starts, notice=True,
                           with_optimum=False, workers=args.workers)
        wall = time.perf_counter() - t0
        for name in ("uniform-progress", "orch"):
            s = summarize(name, all_results(noticed, name))
            print(f"{'  + notice':<16}{name:<18}{s.mean_cost:7.3f}{s.worst_cost:7.3f}{s.met_pct:7.1f}"
                  f"{s.mean_cost - opt_mean:9.3f}")
        print(f"{'':<16}{versus_up(noticed)}; {wall:.1f} s")
    # The CLI on the whole set with its defaults, timed against an empty interpreter.
    cmd = [sys.executable, "-m", "orchestrator", "simulate", "--traces", str(args.traces), "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
    base = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    took = time.perf_counter() - t0
    print(f"orch simulate --traces {args.traces} (defaults: 8 starts, all policies, optimum): {took:.1f} s "
          f"wall on {os.cpu_count()} CPUs ({took / base:.0f}x python -c pass)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
