"""``orch tick``'s report: a tick that met errors is never called quiet, and it exits 1 (a script reads that)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.forkserver import ForkServer
from tests.support.sshd import free_port

ROOT = Path(__file__).resolve().parents[1]


def _orch(forkserver: ForkServer, env: dict[str, str], cold: bool, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m orchestrator ...``: ``cold`` a true subprocess (its stderr then also shows what importing orch
    says), else a child forked warm (tests/support/forkserver.py), the same command without the ~2 s of start."""
    if cold:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=120)
    return forkserver.run("orchestrator", args, env=env, cwd=ROOT, timeout=120)


def test_a_tick_that_could_not_list_a_cloud_says_its_errors_not_quiet(tmp_path: Path, forkserver: ForkServer) -> None:
    """A cloud that cannot be listed may hold a billing machine the store does not know of: the text report
    said "tick 1: quiet" above the error lines, which reads as all well (from cron, say)."""
    config = tmp_path / "config.yaml"
    closed = f"http://127.0.0.1:{free_port()}/api/v1"      # nothing listens there: the listing fails
    config.write_text(yaml.safe_dump({"owner": "alice", "providers": {"lambda": {
        "base_url": closed, "min_interval_s": 0.0, "retry_attempts": 1, "retry_initial_wait_s": 0.001,
        "retry_max_wait_s": 0.01, "timeout_s": 5.0}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(ORCH_CONFIG=str(config), ORCH_DATABASE_URL=f"sqlite:///{tmp_path / 'orch.db'}",
               LAMBDA_API_KEY="test-key-not-a-secret", XDG_DATA_HOME=str(tmp_path / "d"),
               XDG_CACHE_HOME=str(tmp_path / "k"), PYTHONPATH=str(ROOT))
    text = _orch(forkserver, env, True, "tick")
    lines = text.stdout.splitlines()
    assert lines[0] == "tick 1: nothing changed, 1 error", text.stdout
    assert lines[1].startswith("  error: lambda: list failed: ")
    assert max(map(len, lines)) <= 80 and all(line.startswith("    ") for line in lines[2:]), text.stdout
    # From cron or CI only the exit code is read: a tick that met errors is a failed tick, in text and in JSON.
    assert text.returncode == 1, text.stderr
    assert text.stderr.splitlines()[-1] == "error: tick 1 met 1 error", text.stderr
    as_json = _orch(forkserver, env, False, "tick", "--json")
    assert as_json.returncode == 1, as_json.stderr
    [line] = as_json.stdout.splitlines()                # stdout stays one JSON object per tick
    doc = json.loads(line)
    assert doc["quiet"] and len(doc["errors"]) == 1   # --json keeps both facts apart, as before
    assert as_json.stderr.splitlines()[-1] == "error: tick 1 met 1 error", as_json.stderr


def test_a_tick_that_met_no_error_exits_0(tmp_path: Path, forkserver: ForkServer) -> None:
    """The other side of the exit code: a tick with no cloud to list and nothing to do is quiet, exit 0."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"owner": "alice"}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(ORCH_CONFIG=str(config), ORCH_DATABASE_URL=f"sqlite:///{tmp_path / 'orch.db'}",
               XDG_DATA_HOME=str(tmp_path / "d"), XDG_CACHE_HOME=str(tmp_path / "k"), PYTHONPATH=str(ROOT))
    for args in ((), ("--json",), ("--until-quiet",)):
        done = _orch(forkserver, env, args == (), "tick", *args)   # the first cold: nothing said at import either
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert done.stderr == "", (args, done.stderr)
    assert done.stdout == "tick 1: quiet\n"
