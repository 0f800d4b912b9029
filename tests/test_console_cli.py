"""`orch console` and `orch daemon --console` as real processes: they serve the console on loopback, refuse a
non-loopback address without a token (before anything else), and stop on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from orchestrator.store.db import open_store
from tests.crash_world import ROOT, write_catalog
from tests.support import console_world


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    write_catalog(tmp_path / "catalog")
    env.update(ORCH_DATABASE_URL=f"sqlite:///{tmp_path / 'orch.db'}", ORCH_CATALOG_DIR=str(tmp_path / "catalog"),
               XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    store = open_store(env["ORCH_DATABASE_URL"])
    console_world.fill(store, datetime.now(UTC))
    store.close()
    return env


def _orch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def _wait_for(proc: subprocess.Popen[str], read, what: str) -> str:  # type: ignore[no-untyped-def]
    """Read lines with ``read`` until one holds the console's URL (the process is killed if it never comes)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = read()
        if not line:
            assert proc.poll() is None, f"{what} exited: {proc.communicate()[1][-2000:]}"
            continue
        if "http://127.0.0.1:" in line:
            return line
    raise AssertionError(f"{what} never said where it serves")


def test_console_refuses_a_public_address_without_a_token(tmp_path: Path) -> None:
    env = _env(tmp_path)
    for args in (["console", "--bind", "0.0.0.0:8470"], ["daemon", "--console", "0.0.0.0:8470"]):
        out = _orch(*args, env=env)
        assert out.returncode == 2, out.stderr
        assert "set a token" in out.stderr and "Traceback" not in out.stderr
    short = _orch("console", "--bind", "0.0.0.0:8470", env={**env, "ORCH_CONSOLE_TOKEN": "hunter2"})
    assert short.returncode == 2 and "too short" in short.stderr and "hunter2" not in short.stderr


def test_orch_console_serves_the_store_until_sigterm(tmp_path: Path) -> None:
    env = _env(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "console", "--bind", "127.0.0.1:0"], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = _wait_for(proc, proc.stdout.readline, "orch console")
        url = line.split(" on ", 1)[1].split(" ", 1)[0]
        page = httpx.get(url, timeout=30)
        assert page.status_code == 200 and "llama-ft" in page.text
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err[-2000:]
        assert "GET / 200" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_daemon_serves_the_console_beside_the_scheduler(tmp_path: Path) -> None:
    env = _env(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "daemon", "--interval", "0.5", "--console",
                             "127.0.0.1:0"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stderr is not None
        line = _wait_for(proc, proc.stderr.readline, "orch daemon")
        url = json.loads(line)["url"]
        page = httpx.get(url + "jobs/llama-ft", timeout=30)
        assert page.status_code == 200 and "tl-relaunch" in page.text
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err[-2000:]
        msgs = [json.loads(x)["msg"] for x in err.splitlines() if x.startswith("{")]
        assert msgs[-1] == "daemon stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
