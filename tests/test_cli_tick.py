"""``orch tick``'s text report: a tick that met errors is never called quiet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.sshd import free_port

ROOT = Path(__file__).resolve().parents[1]


def test_a_tick_that_could_not_list_a_cloud_says_its_errors_not_quiet(tmp_path: Path) -> None:
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

    def tick(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", "tick", *args], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=120)

    text = tick()
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "tick 1: nothing changed, 1 error", text.stdout
    assert lines[1].startswith("  error: lambda: list failed: ")
    doc = json.loads(tick("--json").stdout.splitlines()[0])
    assert doc["quiet"] and len(doc["errors"]) == 1   # --json keeps both facts apart, as before
