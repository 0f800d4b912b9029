#!/usr/bin/env python3
"""Benchmark: `orch quote --gpu A100-80G --count 4` (the table, --json) and `orch quote` against `python -c pass`.

    python tests/bench/bench_quote.py [--rounds 15] [--catalog-rows 10000]

Two cases: the shipped catalog alone, and a refreshed user catalog of ``--catalog-rows`` rows (generated in a
temporary data directory with orch's own writer, spread over the six providers and every GPU, as a refresh
writes them). Each case runs the quote (table, --json, then the GPU list) and the baseline alternately (so
machine noise hits both alike), then prints each median wall time, their ratio and the quote's peak RSS. orch's
modules are byte-compiled first (``compile_bytecode``), as an install leaves them. Target: ratio <= 3, peak RSS
<= 80 MB.
Not a test: it asserts nothing; it reports.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


CONSOLE_SCRIPT = """#!{python}
import re
import sys
from orchestrator.cli.entry import run
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(run())
"""


def orch_command(tmp: Path) -> list[str]:
    """The installed console script next to this interpreter when it runs this tree's entry point, else the
    same script as pip writes it (an editable install made before the entry point moved still names the old
    one)."""
    script = Path(sys.executable).with_name("orch")
    if not script.exists():
        script = Path(shutil.which("orch") or tmp / "none")
    if script.exists() and "orchestrator.cli.entry" in script.read_text(errors="replace"):
        return [str(script)]
    made = tmp / "orch"
    made.write_text(CONSOLE_SCRIPT.format(python=sys.executable))
    made.chmod(0o755)
    return [str(made)]


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one child process."""
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env,
                         file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} exited {os.waitstatus_to_exitcode(status)}")
    return elapsed, usage.ru_maxrss


def write_user_catalog(data_home: Path, rows: int) -> int:
    """A refreshed catalog of about ``rows`` rows under ``data_home`` (orch's writer, synthetic prices)."""
    sys.path.insert(0, str(ROOT))
    from providers.base import Market, Offer
    from providers.catalog.fileformat import render, write_atomic
    from providers.catalog.loader import user_catalog_file
    from providers.gpus import GPU_MODELS, Interconnect

    rng = random.Random(17)
    providers = ("aws", "gcp", "azure", "runpod", "vastai", "lambda")
    captured = datetime.now(UTC) - timedelta(hours=2)
    per_provider = rows // len(providers)
    written = 0
    for provider in providers:
        offers = []
        for i in range(per_provider):
            model = GPU_MODELS[i % len(GPU_MODELS)]
            count = (1, 2, 4, 8)[(i // len(GPU_MODELS)) % 4]
            offers.append(Offer(
                provider, f"{provider}-type-{i % 97}-{count}x", f"region-{i % 41}", f"zone-{i}", model.name, count,
                float(model.vram_gb), 8.0 * count, 64.0 * count, Interconnect.PCIE,
                Market.SPOT if i % 3 == 0 else Market.ON_DEMAND, round(rng.uniform(0.2, 4.0) * count, 4),
                captured.date(), False, captured_at=captured, price_source=f"bench {provider}"))
        os.environ["XDG_DATA_HOME"] = str(data_home)
        write_atomic(user_catalog_file(provider), render(offers))
        written += len(offers)
    return written


#: Each case's words after ``orch`` and its label: the table, --json, and the GPU list (no --gpu).
CASES = ((["quote", "--gpu", "A100-80G", "--count", "4"], "table"),
         (["quote", "--gpu", "A100-80G", "--count", "4", "--json"], "--json"),
         (["quote"], "no --gpu"))


def bench(label: str, env: dict[str, str], rounds: int, orch: list[str]) -> None:
    for words, case in CASES:
        quote = [*orch, *words]
        baseline = [sys.executable, "-c", "pass"]
        run_once(quote, env), run_once(baseline, env)  # warm the page cache and .pyc files
        q_times, b_times, q_rss = [], [], []
        for _ in range(rounds):
            t, rss = run_once(quote, env)
            q_times.append(t)
            q_rss.append(rss)
            b_times.append(run_once(baseline, env)[0])
        q_med, b_med = statistics.median(q_times), statistics.median(b_times)
        print(f"== {label}, {case}")
        print(f"command:           orch {' '.join(quote[len(orch):])}")
        print(f"rounds:            {rounds} (alternating)")
        print(f"orch quote median: {q_med * 1000:.1f} ms")
        print(f"python -c pass:    {b_med * 1000:.1f} ms")
        print(f"ratio:             {q_med / b_med:.2f}  (target <= 3)")
        print(f"peak RSS (quote):  {max(q_rss) / 1024:.1f} MB  (target <= 80)")


def compile_bytecode() -> None:
    """Byte-compile orch's own modules first, as ``pip install`` does for an installed package (and as a first
    run does for an editable one). Without it, a shell with PYTHONDONTWRITEBYTECODE=1 (this project's CI
    machines set it) compiles ~35 modules from source on every run: ~100 ms of a ~250 ms quote here."""
    import compileall

    for package in ("orchestrator", "providers"):
        compileall.compile_dir(str(ROOT / package), quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--catalog-rows", type=int, default=10_000,
                        help="rows of the refreshed user catalog in the second case (0: skip it)")
    args = parser.parse_args()
    compile_bytecode()
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
    with tempfile.TemporaryDirectory(prefix="orch-bench-") as tmp:
        # The quote's prebuilt catalog index (providers/catalog/quickindex.py) goes to a cache of the run's own;
        # each case's warm-up quote builds it, as a first quote after an install or a refresh does.
        base = {**os.environ, "PYTHONPATH": path, "XDG_DATA_HOME": str(Path(tmp) / "empty"),
                "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        base.pop("ORCH_CATALOG_DIR", None)
        orch = orch_command(Path(tmp))
        bench("shipped catalog", base, args.rounds, orch)
        if args.catalog_rows:
            refreshed = Path(tmp) / "refreshed"
            written = write_user_catalog(refreshed, args.catalog_rows)
            bench(f"refreshed user catalog, {written} rows", {**base, "XDG_DATA_HOME": str(refreshed)}, args.rounds,
                  orch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
