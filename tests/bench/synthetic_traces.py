#!/usr/bin/env python3
"""Synthetic spot availability traces in the public format, from a fixed seed: a check against tuning.

    python tests/bench/synthetic_traces.py OUT_DIR [--seed 20] [--days 21]

Writes OUT_DIR/<regime>/zone-<i>.json (three zones per regime, so each regime is three single-zone sets and
one multi-zone set). Nobody tuned a policy on these; they exist to see whether what a policy gains on the
public traces holds in regimes of other shapes. Run lengths are lognormal (long-tailed, as the public
traces' are) unless said otherwise:

- calm: long available runs (median 12 h), short outages (median 20 min); gap 5 min.
- flappy: short runs both ways (median 25 min available, 8 min out); gap 1 min.
- diurnal: spot scarce in each zone's daytime peak (outages of 3-9 h starting around 09:00 local, zones
  a few hours apart), calm at night; gap 5 min.
- crunches: calm zones, and every ~40 h a crunch takes all zones out together for 2-12 h (correlated);
  gap 5 min.
- scarce: available 20-25% of the time (median 1 h available, 3.5 h out); gap 5 min.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Callable
from pathlib import Path

ZONES = 3


def lognormal_h(rng: random.Random, median_h: float, sigma: float = 1.0) -> float:
    return median_h * math.exp(sigma * rng.gauss(0.0, 1.0))


def alternating(rng: random.Random, ticks: int, gap_h: float, up: Callable[[], float],
                down: Callable[[], float]) -> list[int]:
    """0/1 per tick from alternating available/outage runs (the first state drawn by the share of time)."""
    out: list[int] = []
    state = rng.random() < 0.7
    while len(out) < ticks:
        hours = up() if state else down()
        out.extend([1 if state else 0] * max(1, round(hours / gap_h)))
        state = not state
    return out[:ticks]


def calm(rng: random.Random, ticks: int, gap_h: float, zone: int) -> list[int]:
    return alternating(rng, ticks, gap_h, lambda: lognormal_h(rng, 12.0), lambda: lognormal_h(rng, 1 / 3))


def flappy(rng: random.Random, ticks: int, gap_h: float, zone: int) -> list[int]:
    return alternating(rng, ticks, gap_h, lambda: lognormal_h(rng, 25 / 60, 1.2), lambda: lognormal_h(rng, 8 / 60))


def scarce(rng: random.Random, ticks: int, gap_h: float, zone: int) -> list[int]:
    return alternating(rng, ticks, gap_h, lambda: lognormal_h(rng, 1.0), lambda: lognormal_h(rng, 3.5))


def diurnal(rng: random.Random, ticks: int, gap_h: float, zone: int) -> list[int]:
    base = alternating(rng, ticks, gap_h, lambda: lognormal_h(rng, 6.0), lambda: lognormal_h(rng, 0.3))
    offset_h = 3.0 * zone
    day = 0
    while (day * 24 + 9 + offset_h) / gap_h < ticks:
        start = (day * 24 + 9 + offset_h + rng.uniform(-1.5, 1.5)) / gap_h
        length = rng.uniform(3.0, 9.0) / gap_h
        for i in range(max(0, round(start)), min(ticks, round(start + length))):
            base[i] = 0
        day += 1
    return base


def crunches(rng: random.Random, ticks: int, gap_h: float, zone: int, events: list[tuple[float, float]]) -> list[int]:
    base = alternating(rng, ticks, gap_h, lambda: lognormal_h(rng, 8.0), lambda: lognormal_h(rng, 0.5))
    for start_h, length_h in events:
        # Zones leave and come back a little apart: the same crunch, not the same tick.
        lo = round((start_h + rng.uniform(0, 0.5)) / gap_h)
        hi = round((start_h + length_h + rng.uniform(-0.5, 0.5)) / gap_h)
        for i in range(max(0, lo), min(ticks, hi)):
            base[i] = 0
    return base


REGIMES: dict[str, tuple[float, Callable[..., list[int]]]] = {
    "calm": (300.0, calm),
    "flappy": (60.0, flappy),
    "diurnal": (300.0, diurnal),
    "crunches": (300.0, crunches),
    "scarce": (300.0, scarce),
}


def generate(out: Path, seed: int = 20, days: float = 21.0) -> list[Path]:
    """Write every regime's zones under ``out``; returns the regime directories."""
    dirs = []
    for index, (name, (gap_s, make)) in enumerate(REGIMES.items()):
        rng = random.Random(seed * 1000 + index)
        gap_h = gap_s / 3600
        ticks = round(days * 24 / gap_h)
        events: list[tuple[float, float]] = []
        t = rng.expovariate(1 / 40)
        while t < days * 24:
            events.append((t, rng.uniform(2.0, 12.0)))
            t += rng.expovariate(1 / 40)
        directory = out / name
        directory.mkdir(parents=True, exist_ok=True)
        for zone in range(ZONES):
            data = make(rng, ticks, gap_h, zone, events) if name == "crunches" else make(rng, ticks, gap_h, zone)
            doc = {"metadata": {"gap_seconds": gap_s, "generator": f"tests/bench/synthetic_traces.py seed {seed}"},
                   "data": data}
            (directory / f"zone-{zone}.json").write_text(json.dumps(doc, separators=(",", ":")))
        dirs.append(directory)
    return dirs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--days", type=float, default=21.0)
    args = parser.parse_args()
    for d in generate(args.out, args.seed, args.days):
        files = sorted(d.glob("*.json"))
        shares = [sum(json.loads(f.read_text())["data"]) / len(json.loads(f.read_text())["data"]) for f in files]
        print(f"{d}: {len(files)} zones, available {', '.join(f'{s:.2f}' for s in shares)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
