#!/usr/bin/env python3
"""How much of a zone-set row's gap is left to an online policy: orch beside orch given a glimpse of the future.

    python tests/bench/policy_headroom.py TRACE_DIR [--settings 72/0.5,60/0.5] [--starts 12] [--workers N]
    python tests/bench/policy_headroom.py --synthetic --seed 101   # tests/bench/synthetic_traces.py

Zone sets at an overhead of at least ``SET_PLAN_MIN_OVERHEAD_H`` are decided by orch-mdp's plan
(orch.py's ``set_plan``); this runs the bench's jobs there (multi-zone sets, the same start ticks, no notice) with
Uniform Progress, the offline optimum, orch, and three diagnostics that are orch with one thing it cannot know:
- ``+zone``: each new spot instance goes to the launchable zone whose current run will last the longest;
- ``+filter``: a launch the plan asks for is made only if that zone's run will last the break-even d / (1 - k)
  (else the job stays on on-demand, or waits);
- ``+both``: the two together.
Per row it prints each one's mean and the share of UP's gap to the optimum it closes, (UP - x) / (UP - opt),
and per zone set the same for orch and ``+zone``. The diagnostics are not policies (they read the trace ahead);
they say where a row's gap lies: in which runs turn out long. docs/policy.md (v3.6) has the figures. Reports;
asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.policy.evaluate import start_ticks  # noqa: E402
from orchestrator.policy.hybrid import HybridPolicy  # noqa: E402
from orchestrator.policy.mdp import MdpPolicy  # noqa: E402
from orchestrator.policy.model import ON_DEMAND, WAIT, Action, Mode, Observation, ProblemSpec  # noqa: E402
from orchestrator.policy.optimum import DEFAULT_MAX_LEVELS, optimum  # noqa: E402
from orchestrator.policy.orch import OrchPolicy  # noqa: E402
from orchestrator.policy.policies import UniformProgressPolicy  # noqa: E402
from orchestrator.policy.simulator import simulate  # noqa: E402
from orchestrator.policy.traces import ZoneSet, discover  # noqa: E402
from tests.bench.bench_policy import closed_share  # noqa: E402

VARIANTS = ("orch", "+zone", "+filter", "+both")


class ForesightPlanner(MdpPolicy):
    """orch-mdp reading the trace ahead where ``zone`` / ``launch_filter`` say (see the module docstring)."""

    def __init__(self, zones: ZoneSet, start_tick: int, zone: bool, launch_filter: bool) -> None:
        super().__init__()
        self._avail = [z.available for z in zones.zones]
        self._start = start_tick
        self._zone, self._filter = zone, launch_filter

    def run_left_h(self, z: int, obs: Observation) -> float:
        """Hours zone z's current run lasts from this tick on (this tick included)."""
        avail, i = self._avail[z], self._start + obs.tick
        n = 0
        while i + n < len(avail) and avail[i + n]:
            n += 1
        return n * obs.gap_h

    def best_zone(self, obs: Observation, zones: list[int]) -> int:
        if self._zone:
            return max(zones, key=lambda z: self.run_left_h(z, obs))
        return super().best_zone(obs, zones)

    def decide(self, obs: Observation) -> Action:
        action = super().decide(obs)
        if self._filter and action.mode is Mode.SPOT and obs.mode is not Mode.SPOT:
            assert action.zone is not None
            k = obs.spot_prices[action.zone]
            if self.run_left_h(action.zone, obs) < obs.spec.overhead_h / (1 - k):
                return ON_DEMAND if obs.mode is Mode.ON_DEMAND else WAIT
        return action


class ForesightOrch(OrchPolicy):
    """orch's rules with the zone set's planner replaced by a ``ForesightPlanner``."""

    def __init__(self, zones: ZoneSet, start_tick: int, zone: bool, launch_filter: bool) -> None:
        super().__init__()
        self._args = (zones, start_tick, zone, launch_filter)

    def reset(self, spec: ProblemSpec, zones: int) -> None:
        super().reset(spec, zones)
        if self._planner is not None:
            self._planner = ForesightPlanner(*self._args)
            self._planner.reset(spec, zones)


def one_set(args: tuple[ProblemSpec, ZoneSet, tuple[int, ...]]) -> dict[str, list[float]]:
    """Every variant's normalized cost per start on one zone set, UP's and the optimum's."""
    spec, zones, starts = args
    out: dict[str, list[float]] = {"UP": [simulate(spec, zones, UniformProgressPolicy(), s).normalized_cost
                                          for s in starts]}
    for name in VARIANTS:
        costs = []
        for s in starts:
            if name == "orch":
                policy: HybridPolicy = HybridPolicy()
            else:
                zone, launch_filter = name in ("+zone", "+both"), name in ("+filter", "+both")
                policy = HybridPolicy(rules=ForesightOrch(zones, s, zone, launch_filter))
            costs.append(simulate(spec, zones, policy, s).normalized_cost)
        out[name] = costs
    out["opt"] = [r.normalized_cost for r in optimum(spec, zones, starts, DEFAULT_MAX_LEVELS)
                  if r.normalized_cost is not None]
    return out


def run(sets: list[ZoneSet], settings: list[tuple[float, float]], starts: int, workers: int) -> None:
    multi = [s for s in sets if len(s.zones) > 1]
    print(f"{len(multi)} zone sets, {starts} starts each, no notice; closed = (UP - x) / (UP - opt)")
    for deadline, overhead in settings:
        spec = ProblemSpec(48.0, deadline, overhead, 0.3)
        jobs = [(spec, zs, tuple(start_ticks(zs, spec, starts))) for zs in multi]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            per_set = list(pool.map(one_set, jobs))
        means = {k: statistics.fmean(v for r in per_set for v in r[k]) for k in ("UP", "opt", *VARIANTS)}
        cells = "  ".join(f"{k} {means[k]:.4f} ({closed_share(means['UP'], means[k], means['opt']):.1f}%)"
                          for k in VARIANTS)
        print(f"D{deadline:g} d{overhead:g}: UP {means['UP']:.4f} opt {means['opt']:.4f}  {cells}")
        for zs, r in zip(multi, per_set, strict=True):
            up, opt = statistics.fmean(r["UP"]), statistics.fmean(r["opt"])
            print(f"    {zs.name:<40} UP {up:.4f} opt {opt:.4f} orch {statistics.fmean(r['orch']):.4f} "
                  f"+zone {statistics.fmean(r['+zone']):.4f}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("traces", type=Path, nargs="?")
    parser.add_argument("--synthetic", action="store_true")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--starts", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--settings", default="72/0.5,60/0.5")
    args = parser.parse_args()
    settings = [(float(d), float(o)) for d, o in (part.split("/") for part in args.settings.split(","))]
    if args.synthetic:
        from tests.bench.synthetic_traces import generate

        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp), seed=args.seed)
            run(discover([Path(tmp)]), settings, args.starts, args.workers)
        return 0
    if args.traces is None:
        parser.error("give TRACE_DIR or --synthetic")
    run(discover([args.traces]), settings, args.starts, args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
