"""The lean ``orch quote`` (orchestrator/cli/entry.py): the same bytes as the full command line, without it.

Each case runs both as real processes on the shipped catalog: the console script's entry point (which
parses the common forms itself) and the Typer application alone. stdout, stderr and the exit code must match.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.entry import lean_quote_args
from orchestrator.cli.quote_run import InterconnectOpt, QuoteArgs, SortOpt

ROOT = Path(__file__).resolve().parents[1]
# Both read the clock once, for the prices' ages: the same fixed instant for both, so the bytes can match.
FIXED_NOW = ("import sys, datetime as dt; sys.argv[0] = 'orch'\n"
             "import orchestrator.cli.quote_run as q\n"
             "class Fixed(dt.datetime):\n"
             "    @classmethod\n"
             "    def now(cls, tz=None): return dt.datetime(2026, 12, 6, 12, 0, tzinfo=tz)\n"
             "q.datetime = Fixed\n")
LEAN = FIXED_NOW + "from orchestrator.cli.entry import run; run()"
FULL = FIXED_NOW + "from orchestrator.cli.main import run; run()"
FRAMEWORK = ("typer", "click", "rich", "shellingham")


def run(code: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=60)


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    # An empty home: no user catalog, no config, COLUMNS fixed so both see the same terminal width.
    return {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c"),
            "XDG_DATA_HOME": str(tmp_path / "d"), "XDG_CACHE_HOME": str(tmp_path / "k"), "COLUMNS": "80"}


CASES = [
    ["quote", "--gpu", "A100-80G", "--count", "4"],
    ["quote", "--gpu", "A100-80G", "--count", "4", "--json"],
    ["quote"],
    ["quote", "--json"],
    ["quote", "--count", "8"],
    ["quote", "-g", "4090", "-w"],
    ["quote", "--gpu=H100:8", "--all-regions"],
    ["quote", "--gpu", "H100", "--gpu", "A100-80G", "-c", "8", "--sort", "price-per-gpu", "--limit", "3"],
    ["quote", "--gpu", "H100", "--spot", "--max-price", "20.5", "-p", "aws", "--provider", "gcp", "-r", "us-*"],
    ["quote", "--gpu", "A100-80G", "--on-demand", "--min-vram", "40", "--interconnect", "nvlink", "-n", "2"],
    ["quote", "--gpu", "A100-80G", "--count", "3"],                 # nothing matches: exit 1, hints on stderr
    ["quote", "--gpu", "A100-90G"],                                 # bad input: exit 2, one line
    ["quote", "--gpu", "H100", "--provider", "awz"],
    ["quote", "--gpu", "H100", "--count", "0"],
    ["quote", "--gpu", "H100", "--count", "-2"],                    # not a plain form: the full parser's error
    ["quote", "--gpu", "H100", "--count", "four"],
    ["quote", "--gpu", "H100", "--bogus"],
    ["quote", "--history"],
]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(c) for c in CASES])
def test_the_lean_quote_prints_what_the_full_command_line_prints(args: list[str], env: dict[str, str]) -> None:
    lean, full = run(LEAN, *args, env=env), run(FULL, *args, env=env)
    assert (lean.returncode, lean.stdout, lean.stderr) == (full.returncode, full.stdout, full.stderr)
    assert "Traceback" not in lean.stderr


#: What the lean quote must not load (tests/bench/bench_quote.py: each costs its start): SDKs, the database, the
#: config reader's dependencies; the stdlib it was made to do without (typing; inspect and copy, which dataclasses
#: imports and entry.py defers; shutil and textwrap without a terminal); orch's modules a quote from the prebuilt
#: catalog index does not need.
NOT_ON_THE_QUOTE_PATH = (
    *FRAMEWORK, "pydantic", "boto3", "botocore", "google", "azure", "sqlalchemy", "yaml", "paramiko",
    "typing", "inspect", "ast", "dis", "tokenize", "copy", "shutil", "textwrap", "hashlib", "csv", "tempfile",
    "providers.base", "providers.registry", "providers.errors", "providers.fabric", "providers.catalog.layers",
    "providers.catalog.fileformat", "orchestrator.config.file", "orchestrator.store",
)


def test_the_lean_quote_imports_only_what_it_uses(env: dict[str, str]) -> None:
    env = {k: v for k, v in env.items() if k != "COLUMNS"}     # output to a pipe, as the benchmark's
    loaded = ("import sys\n"
              f"names = {NOT_ON_THE_QUOTE_PATH!r}\n"
              # A deferred module (entry._DeferredModule) sits in sys.modules until first used: not loaded.
              "print(sorted(n for n in names if any(m == n or m.startswith(n + '.') for m, mod in sys.modules.items()\n"
              "                                    if type(mod).__name__ != '_DeferredModule')))\n")
    baseline = run(loaded, env=env)          # what the interpreter alone loads here (a sitecustomize, say)
    assert baseline.returncode == 0, baseline.stderr
    code = ("import sys, atexit; sys.argv[0] = 'orch'\n"
            f"atexit.register(lambda: exec({loaded!r}))\n"
            "from orchestrator.cli.entry import run; run()")
    assert run(code, "quote", env=env).returncode == 0       # the first quote builds the catalog index
    for args in (["quote", "--gpu", "A100-80G", "--count", "4"], ["quote", "--gpu", "A100-80G", "--count", "4",
                 "--json"], ["quote"], ["quote", "--json"]):
        out = run(code, *args, env=env)
        assert out.returncode == 0, out.stderr
        extra = set(ast.literal_eval(out.stdout.rstrip().splitlines()[-1])) - set(ast.literal_eval(baseline.stdout))
        assert sorted(extra) == [], args


def test_other_commands_and_unusual_forms_go_to_the_full_command_line() -> None:
    for words in (["--help"], ["-h"], ["--history", "--gpu", "H100"], ["--live"], ["--count", "+4"],
                  ["--count", "4_0"], ["--count", "٤"], ["--max-price", "inf"], ["--gpu"], ["--gpu", "-w"],
                  ["extra"], ["--", "--gpu", "H100"], ["-c4"], ["--json=yes"], ["--sort", "cheap"],
                  ["--interconnect", "ib"], ["-g=H100"]):
        assert lean_quote_args(words) is None, words


def test_the_plain_forms_parse_to_the_commands_values() -> None:
    assert lean_quote_args([]) == QuoteArgs()
    assert lean_quote_args(["--gpu", "H100", "-g", "A100-80G", "--count=4", "-n", "2", "--spot", "--json", "-w",
                            "--sort", "price-per-gpu", "--interconnect", "pcie", "--max-price", "12.5",
                            "--min-vram", "40", "--limit", "3", "-p", "aws", "-r", "us-*", "--all-regions",
                            "--on-demand"]) == QuoteArgs(
        gpu=("H100", "A100-80G"), count=4, nodes=2, spot=True, on_demand=True, provider=("aws",),
        region=("us-*",), max_price=12.5, min_vram=40.0, interconnect=InterconnectOpt.pcie,
        sort=SortOpt.price_per_gpu, limit=3, as_json=True, wide=True, all_regions=True)
