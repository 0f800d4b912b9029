"""A reader of orch's output that goes away early (``orch quote ... | head -3``) ends orch quietly: no "internal
error", no "Exception ignored ... BrokenPipeError", exit status 141 as a Unix tool killed by SIGPIPE.

Each case runs the real command with its stdout on a pipe shrunk to one page (``F_SETPIPE_SZ``), reads a few bytes
and closes the read end, as ``head`` does. Every case prints more than the pipe holds, so orch's next write (or
its last flush) meets the closed pipe for certain: no timing decides the outcome. Both with Python's stdout
buffered (a user's shell) and unbuffered (``PYTHONUNBUFFERED=1``, as on the project's machines).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.errors import EXIT_STDOUT_CLOSED

ROOT = Path(__file__).resolve().parents[1]
PAGE = 4096
ENTRY = "import sys; sys.argv[0] = 'orch'\nfrom orchestrator.cli.entry import run; run()"  # the console script
FULL = "import sys; sys.argv[0] = 'orch'\nfrom orchestrator.cli.main import run; run()"  # the Typer app alone
LONG_TABLE = ["quote", "--gpu", "H100", "--count", "8", "--all-regions", "-w"]  # ~10 kB on the shipped catalog

CASES = {
    "lean quote, table": (ENTRY, LONG_TABLE),
    "lean quote, --json": (ENTRY, ["quote", "--gpu", "H100", "--count", "8", "--all-regions", "--json"]),
    "full command line, the same table": (FULL, LONG_TABLE),
    "full command line, orch schema": (ENTRY, ["schema"]),
}


def run_into_closed_pipe(code: str, args: list[str], env: dict[str, str]) -> tuple[int, bytes, str]:
    """(exit status, what was read before closing, stderr) of ``python -c code args`` whose reader leaves early."""
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PAGE)
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], stdout=write_end, stderr=subprocess.PIPE, env=env, cwd=ROOT
        )
    finally:
        os.close(write_end)
    try:
        head = os.read(read_end, 64)  # blocks until orch has written something
    finally:
        os.close(read_end)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    return proc.wait(timeout=60), head, err


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="needs Linux's F_SETPIPE_SZ")
@pytest.mark.parametrize("unbuffered", [True, False], ids=["unbuffered", "buffered"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_reader_that_leaves_early_ends_orch_quietly(case: str, unbuffered: bool, tmp_path: Path) -> None:
    code, args = CASES[case]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "c"),
        "XDG_DATA_HOME": str(tmp_path / "d"),
        "XDG_CACHE_HOME": str(tmp_path / "k"),
    }
    env.pop("COLUMNS", None)
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    # The whole output, read to the end, is longer than the pipe: the early close cannot go unnoticed.
    whole = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, env=env, cwd=ROOT, timeout=60)
    assert whole.returncode == 0 and len(whole.stdout) > 2 * PAGE, (whole.returncode, len(whole.stdout))

    status, head, err = run_into_closed_pipe(code, args, env)
    assert head and whole.stdout.startswith(head)
    assert err == ""
    if unbuffered:
        # Unbuffered, Python writes a long text in one write(2); the pipe takes part of it and the rest is dropped
        # without an error (io's raw layer returns the short count, and TextIOWrapper ignores it): nothing fails,
        # exit 0. A table is written line by line, so its next line meets the closed pipe: 141.
        assert status in (0, EXIT_STDOUT_CLOSED)
    else:
        assert status == EXIT_STDOUT_CLOSED


HELP_CASES = {
    "orch --help (Typer's rich help)": (FULL, ["--help"]),
    "orch --help through the console script": (ENTRY, ["--help"]),
}


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="needs Linux's F_SETPIPE_SZ")
@pytest.mark.parametrize("case", list(HELP_CASES))
def test_help_to_a_reader_that_leaves_early_exits_141(case: str, tmp_path: Path) -> None:
    """rich prints help and handles the closed pipe itself (``Console.on_broken_pipe``: exit 1); orch makes it 141.

    Buffered stdout: rich writes the whole help at once and flushes; the pipe takes one page, the reader takes 64
    bytes and leaves, so the flush's remainder meets the closed pipe whenever the help is longer than that."""
    code, args = HELP_CASES[case]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c")}
    env.pop("COLUMNS", None)
    env.pop("PYTHONUNBUFFERED", None)
    whole = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, env=env, cwd=ROOT, timeout=60)
    assert whole.returncode == 0 and len(whole.stdout) > PAGE + 1024, (whole.returncode, len(whole.stdout))

    status, head, err = run_into_closed_pipe(code, args, env)
    assert head and whole.stdout.startswith(head)
    assert err == ""
    assert status == EXIT_STDOUT_CLOSED
