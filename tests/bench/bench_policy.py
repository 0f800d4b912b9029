#!/usr/bin/env python3
"""Benchmark: orch against Uniform Progress and the offline optimum, measured against issue 33's bar.

    python tests/bench/bench_policy.py TRACE_DIR [--starts 12] [--workers N] [--policy orch]
    python tests/bench/bench_policy.py --synthetic [--seed 20] [--starts 12]  # tests/bench/synthetic_traces.py
    ... [--settings 72/0.5,60/0.5]   # a subset of the six settings (deadline/overhead, hours)
    ... [--zones multi]              # only the multi-zone sets (or only the single-zone ones)

TRACE_DIR is e.g. ../shared/reference/spot-traces (never committed here). C = 48 h, k = 0.3; settings
D72/d0.2, D60/d0.2, D96/d0.2, D72/d0.05, D72/d0.5, D60/d0.5; single-zone sets (each file) and multi-zone sets (each
directory) separately; without and with a preemption notice one tick ahead. Per row: UP's mean, orch's mean,
the optimum's mean (the same with or without a notice), gap closed = (UP - orch) / (UP - optimum) and its
standard error over the row's jobs (each job's UP - orch over the row's gap: how well the starts pin it), orch/UP,
the dearest zone set's orch/UP, the worst single run of orch and of UP, deadlines met; then whether the bar
holds: at least 30% of UP's gap to the optimum closed; no set > 1.03 x UP; worst <= UP's worst + 0.02;
100% deadlines. Last, the gap closed averaged over the rows (the bar: at least 45%). Reports; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.policy.evaluate import CaseResult, evaluate  # noqa: E402
from orchestrator.policy.model import ProblemSpec  # noqa: E402
from orchestrator.policy.traces import ZoneSet, discover  # noqa: E402

SETTINGS = [(72.0, 0.2), (60.0, 0.2), (96.0, 0.2), (72.0, 0.05), (72.0, 0.5), (60.0, 0.5)]
#: Issue 33's bar: the share of UP's gap to the optimum closed, in every row and on average.
ROW_CLOSED, MEAN_CLOSED = 30.0, 45.0
UP = "uniform-progress"


def closed_share(up: float, x: float, opt: float) -> float:
    """(UP - x) / (UP - optimum) in per cent: the share of UP's gap to the optimum that ``x`` closes (NaN where
    UP is already optimal)."""
    return 100.0 * (up - x) / (up - opt) if up - opt > 1e-9 else float("nan")


def row(label: str, cases: list[CaseResult], optimum: list[float], policy: str) -> tuple[str, bool, float]:
    up = [r.normalized_cost for c in cases for r in c.results(UP)]
    mine_runs = [r for c in cases for r in c.results(policy)]
    mine = [r.normalized_cost for r in mine_runs]
    met = 100.0 * sum(r.met for r in mine_runs) / len(mine_runs)
    mu, mm, mo = statistics.fmean(up), statistics.fmean(mine), statistics.fmean(optimum)
    closed = closed_share(mu, mm, mo)
    # The closed share is the mean of each job's (UP - orch) over the row's gap: its standard error over the
    # jobs (the denominator taken as known) says how well the row's start times pin it down.
    per_job = [100.0 * (u - m) / (mu - mo) for u, m in zip(up, mine, strict=True)] if mu - mo > 1e-9 else []
    se = statistics.stdev(per_job) / len(per_job) ** 0.5 if len(per_job) > 1 else float("nan")
    ratios = [(statistics.fmean(r.normalized_cost for r in c.results(policy))
               / statistics.fmean(r.normalized_cost for r in c.results(UP)), c.zone_set) for c in cases]
    dearest, which = max(ratios)
    ok = closed >= ROW_CLOSED and dearest <= 1.03 + 1e-12 and max(mine) <= max(up) + 0.02 + 1e-12 \
        and met == 100.0
    line = (f"{label:<22}{len(cases):>5}{mu:>8.4f}{mm:>8.4f}{mo:>8.4f}{closed:>8.0f}%{se:>5.0f}{mm / mu:>8.3f}"
            f"{dearest:>8.3f}{max(mine):>8.3f}{max(up):>8.3f}{met:>7.1f}  {'yes' if ok else 'NO'}"
            + ("" if dearest <= 1.03 else f"  (dearest: {which})"))
    return line, ok, closed


def run(sets: list[ZoneSet], starts: int, workers: int | None, policy: str,
        settings: list[tuple[float, float]] | None = None) -> int:
    print(f"{len(sets)} zone sets ({sum(len(s.zones) == 1 for s in sets)} single-zone), {starts} starts each; "
          f"policy {policy}")
    print(f"{'setting':<22}{'sets':>5}{'UP':>8}{policy:>8}{'opt':>8}{'closed':>9}{'±se':>5}{'/UP':>8}{'set/UP':>8}"
          f"{'worst':>8}{'UPworst':>8}{'met%':>7}  bar")
    held = total = 0
    closed_rows: list[float] = []
    for deadline, overhead in settings or SETTINGS:
        spec = ProblemSpec(48.0, deadline, overhead, 0.3)
        t0 = time.perf_counter()
        plain = evaluate(spec, sets, (UP, policy), starts, workers=workers)
        noticed = evaluate(spec, sets, (UP, policy), starts, notice=True, with_optimum=False, workers=workers)
        for multi in (False, True):
            pick = [i for i, zs in enumerate(sets) if (len(zs.zones) > 1) == multi]
            if not pick:
                continue
            opt = [v for i in pick for v in (plain[i].optimum or ()) if v is not None]
            kind = "multi" if multi else "single"
            for tag, cases in (("", plain), (" +notice", noticed)):
                line, ok, closed = row(f"D{deadline:g} d{overhead:g} {kind}{tag}", [cases[i] for i in pick], opt,
                                       policy)
                print(line, flush=True)
                held += ok
                closed_rows.append(closed)
                total += 1
        print(f"{'':<22}({time.perf_counter() - t0:.0f} s)")
    mean_closed = statistics.fmean(c for c in closed_rows if c == c)
    print(f"bar held in {held} of {total} rows; gap closed on average {mean_closed:.0f}% "
          f"({'meets' if mean_closed >= MEAN_CLOSED else 'below'} the {MEAN_CLOSED:.0f}% bar)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("traces", type=Path, nargs="?")
    parser.add_argument("--synthetic", action="store_true", help="generate tests/bench/synthetic_traces.py's "
                        "traces (fixed seed) into a temporary directory and use them")
    parser.add_argument("--seed", type=int, default=20, help="the synthetic generator's seed")
    parser.add_argument("--starts", type=int, default=12)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--policy", default="orch")
    parser.add_argument("--zones", choices=("all", "single", "multi"), default="all",
                        help="only the single-zone sets (each file) or only the multi-zone ones (each directory)")
    parser.add_argument("--settings", default=None, help="a subset of the settings, e.g. 72/0.5,60/0.5 "
                        "(deadline/overhead in hours; default: all six)")
    args = parser.parse_args()
    settings = None
    if args.settings:
        settings = [(float(d), float(o)) for d, o in (part.split("/") for part in args.settings.split(","))]
    if args.synthetic:
        from tests.bench.synthetic_traces import generate

        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp), seed=args.seed)
            return run(pick(discover([Path(tmp)]), args.zones), args.starts, args.workers, args.policy, settings)
    if args.traces is None:
        parser.error("give TRACE_DIR or --synthetic")
    return run(pick(discover([args.traces]), args.zones), args.starts, args.workers, args.policy, settings)


def pick(sets: list[ZoneSet], zones: str) -> list[ZoneSet]:
    """The zone sets ``--zones`` asks for: all, only single-zone sets, or only multi-zone ones."""
    if zones == "all":
        return sets
    return [s for s in sets if (len(s.zones) > 1) == (zones == "multi")]


if __name__ == "__main__":
    raise SystemExit(main())
