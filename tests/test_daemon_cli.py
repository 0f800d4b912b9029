"""`orch daemon` as a real process against the wire fakes: JSON logs, /metrics on localhost, a second daemon
on the same SQLite store refused (exit 2), SIGTERM stops it cleanly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from orchestrator.store import open_store
from tests.crash_world import ROOT, write_catalog
from tests.daemon_world import Fakes, add_job


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_daemon_serves_metrics_refuses_a_second_one_on_sqlite_and_stops_on_sigterm(fakes: Fakes,
                                                                                   tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(fakes.config_yaml())
    write_catalog(tmp_path / "catalog")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(ORCH_CONFIG=str(config), ORCH_DATABASE_URL=f"sqlite:///{tmp_path / 'orch.db'}",
               ORCH_CATALOG_DIR=str(tmp_path / "catalog"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT))
    store = open_store(env["ORCH_DATABASE_URL"])
    add_job(store, "train")
    store.close()
    port = free_port()
    cmd = [sys.executable, "-m", "orchestrator", "daemon", "--interval", "0.2", "--metrics-port", str(port)]
    daemon = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        body = ""
        deadline = time.monotonic() + 60
        while 'orch_jobs{state="running"} 1.0' not in body:
            assert daemon.poll() is None, daemon.communicate()[1][-2000:]
            assert time.monotonic() < deadline, f"job never ran; last /metrics:\n{body}"
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except httpx.TransportError:
                pass
            time.sleep(0.1)   # polling interval for a condition with a deadline, not a stand-in for an event
        assert 'orch_instances{market="spot",provider="vastai"} 1.0' in body
        assert "orch_burn_usd_per_hour" in body and 'orch_ticks_total{job="reconcile",outcome="ok"}' in body

        second = subprocess.run([*cmd[:-2], "--metrics-port", str(free_port())], cwd=ROOT, env=env, text=True,
                                capture_output=True, timeout=60)
        assert second.returncode == 2
        assert "another orch daemon" in second.stderr and f"pid {daemon.pid}" in second.stderr

        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=30)
        assert daemon.returncode == 0, err[-2000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    logs = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    msgs = [d["msg"] for d in logs]
    assert "daemon started" in msgs and "reconcile tick" in msgs and msgs[-1] == "daemon stopped"
    assert any(d["msg"] == "reconcile tick" and d.get("launched") == 1 for d in logs)
    assert all({"ts", "level", "logger", "msg"} <= set(d) for d in logs)
