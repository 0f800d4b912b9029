"""Fuzz the command line: for every command, hypothesis draws argument lists from its own flags and hostile
values (NaN, huge numbers, control characters, secret-looking text, FIFOs, devices, long names, nothing at
all). Whatever it draws: no traceback, no "internal error", an exit code of 0, 1 or 2, and ``--json``
output that parses. Commands run in-process (typer's CliRunner) on a temporary config and store.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from orchestrator.cli.main import app

FUZZ = settings(max_examples=25, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: fuzz
resources:
  gpu: [L4, T4]
  count: 1
run:
  launcher: command
  command: nvidia-smi
policies:
  estimated_hours: 2
"""
TRACE = '{"metadata": {"gap_seconds": 600}, "data": [1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1, 1]}'

# Each command's flags (a flag may be drawn with no value, or a value for a flag may be drawn alone).
FLAGS: dict[str, list[str]] = {
    "quote": ["--gpu", "-g", "--count", "-c", "--nodes", "-n", "--spot", "--on-demand", "--provider", "-p",
              "--region", "-r", "--max-price", "--min-vram", "--interconnect", "--sort", "--limit", "--json"],
    "validate": [],
    "plan": ["--alternatives", "-a", "--configured", "--json"],
    "render": ["--job", "--node-rank", "--master-addr", "--part"],
    "schema": [],
    "simulate": ["--traces", "-t", "--work", "--deadline", "--overhead", "--spot-price", "--trace-prices",
                 "--policy", "-p", "--starts", "--zones", "--notice", "--no-optimum", "--per-trace", "--json"],
    "status": ["--json"],
    "events": ["--json", "--limit", "--max-wait", "--poll"],
    "logs": ["--node", "--max-wait", "--poll"],
    "db current": ["--url"],
    "providers": ["--json"],
    "down": ["--all", "--yes", "-y", "--timeout", "--poll"],
    "tick": ["--until-quiet", "--max-ticks", "--json"],
    "apply": ["--prune", "--no-launch", "--max-ticks"],
    # never --yes: it launches (the fuzz has no config, so it would stop at "no provider"; not relied on)
    "smoke": ["--provider", "-p", "--store", "--timeout", "--teardown-timeout", "--poll", "--json"],
}
HOSTILE = ["nan", "NaN", "inf", "-inf", "1e309", "-1", "0", "1", "3", "99999999999999999999999", "", " ", "-",
           "--", "A100", "h100,,l4", "us-*", "[", "*", "spot", "json", "agent", "price-per-gpu", "nvlink",
           "48h", "0.0001s", "1:30", "orch", "greedy", "single", "x" * 300, "Q" * 5000, "\x1b[2J", "a\nb",
           "\u202etxt", "\x00", "ghp_9f8E7d6C5b4A3z2Y1x0W9v8U7t6S5r4Q3p2O", "postgresql://u:pw@127.0.0.1:1/x",
           "sqlite:///fuzz.db", "mysql://x", "/dev/zero", "/dev/null", "/nonexistent/x.yaml"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("fuzz-files")
    (root / "job.yaml").write_text(MANIFEST)
    (root / "bad.yaml").write_text("apiVersion: orch/v1\nkind: Job\nname: Bad Name\n")
    (root / "zone.json").write_text(TRACE)
    os.mkfifo(root / "fifo.yaml")
    (root / "dir").mkdir()
    yield {"manifest": str(root / "job.yaml"), "bad": str(root / "bad.yaml"), "trace": str(root / "zone.json"),
           "fifo": str(root / "fifo.yaml"), "dir": str(root / "dir")}


PATH_COMMANDS = {"validate", "plan", "render", "apply"}


def _argv(command: str, files: dict[str, str]) -> st.SearchStrategy[list[str]]:
    """Positional values, then flags each followed by a value (or the other way round). Commands that read
    files mostly get paths: real ones, a FIFO, a directory, a device, a name too long, a missing one."""
    paths = st.sampled_from([*files.values(), "/dev/zero", "/dev/null", "/nonexistent/x.yaml",
                             "p" * 300 + ".yaml", "."])
    hostile = st.sampled_from(HOSTILE)
    values = st.one_of(hostile, hostile, paths, st.text(max_size=12), st.integers(-10**6, 10**6).map(str),
                       st.floats(allow_nan=True, allow_infinity=True).map(repr))
    positional = st.lists(st.one_of(paths, paths, values) if command in PATH_COMMANDS else values, max_size=2)
    flag_value = st.one_of(paths, values) if command == "simulate" else values
    flags = st.lists(st.tuples(st.sampled_from(FLAGS[command]), flag_value), max_size=4) if FLAGS[command] \
        else st.just([])

    def join(pos: list[str], pairs: list[tuple[str, str]], flags_first: bool) -> list[str]:
        opts = [x for pair in pairs for x in pair]
        return opts + pos if flags_first else pos + opts

    return st.builds(join, positional, flags, st.booleans())


def _check(command: str, args: list[str], tmp_path: Path) -> None:
    argv = [*command.split(), *args]
    if command == "events":
        argv = [a for a in argv if a not in ("--follow", "-f")]     # following waits for events by design
    if command == "smoke":
        argv = [a for a in argv if a != "--yes"]                   # a hostile value may spell it
    if command == "simulate":
        argv += ["--workers", "1"]                                  # one process: the fuzz, not a pool
    runner = CliRunner()
    # A fresh working directory per example (what click's deprecated isolated_filesystem gave).
    with tempfile.TemporaryDirectory(dir=tmp_path) as cwd, contextlib.chdir(cwd):
        result = runner.invoke(app, argv)
    what = f"orch {' '.join(repr(a) for a in argv)}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{what}: {result.exception!r}") from result.exception
    assert result.exit_code in (0, 1, 2), (what, result.exit_code, result.stderr[-500:])
    assert "Traceback" not in result.output and "internal error" not in result.stderr, (what, result.stderr)
    if "--json" in argv and result.exit_code == 0 and result.stdout.strip():
        text = result.stdout
        docs = text.splitlines() if command == "events" else [text]
        for doc in docs:
            json.loads(doc, parse_constant=lambda c: pytest.fail(f"{what}: {c} in --json output"))


@pytest.mark.parametrize("command", sorted(FLAGS))
def test_no_traceback_whatever_the_arguments(command: str, files: dict[str, str], tmp_path: Path) -> None:
    @FUZZ
    @given(_argv(command, files))
    def fuzz(args: list[str]) -> None:
        _check(command, args, tmp_path)

    fuzz()
