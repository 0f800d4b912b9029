"""``orch quote --live`` and ``orch providers`` against the local fake clouds (real adapters)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._jobs_clouds import FakeClouds, start_clouds

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clouds() -> Iterator[FakeClouds]:
    c = start_clouds()
    yield c
    c.close()


def orch(clouds: FakeClouds, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **clouds.env(), "PYTHONPATH": str(ROOT), "ORCH_CONFIG": str(config)}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_quote_live_adds_marked_live_offers_from_the_fakes(clouds: FakeClouds, tmp_path: Path) -> None:
    config = clouds.write_config(tmp_path / "config.yaml")
    offline = json.loads(orch(clouds, config, "quote", "--gpu", "RTX4090", "--json").stdout)
    out = orch(clouds, config, "quote", "--gpu", "RTX4090", "--json", "--live")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    live = [r for r in rows if r["source"] == "live"]
    assert live and all(r["availability"] == "available" for r in live if r["provider"] == "vastai")
    assert {r["provider"] for r in live} <= {"vastai", "lambda", "runpod"}
    assert all(r["source"] == "catalog" for r in offline)
    assert [r["total_price_hr"] for r in rows] == sorted(r["total_price_hr"] for r in rows)


def test_providers_ready_against_the_fakes(clouds: FakeClouds, tmp_path: Path) -> None:
    config = clouds.write_config(tmp_path / "config.yaml")
    out = orch(clouds, config, "providers", "--json")
    assert out.returncode == 0, out.stderr
    status = {r["provider"]: r["status"] for r in json.loads(out.stdout)}
    assert status == {"aws": "not configured", "gcp": "ready", "azure": "ready", "runpod": "ready",
                      "vastai": "ready", "lambda": "ready", "ssh": "not configured"}
    for secret in clouds.env().values():
        assert secret not in out.stdout     # credentials are never printed


def test_quote_live_table_marks_live_rows(clouds: FakeClouds, tmp_path: Path) -> None:
    config = clouds.write_config(tmp_path / "config.yaml")
    out = orch(clouds, config, "quote", "--gpu", "RTX4090", "--live")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:] if line.startswith("vastai")]
    assert any("live" in r for r in rows)          # live rows beside the catalog's own vastai rows
    assert "priced by the provider's API just now" in " ".join(out.stdout.split())
