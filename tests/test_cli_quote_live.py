"""``orch quote --live`` and ``orch providers`` against the local fake clouds (real adapters)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

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


def test_the_gpu_list_builds_and_asks_live_providers_once_not_once_per_count(tmp_path: Path) -> None:
    """``orch quote --live`` with no --gpu asks its sources once per GPU count (1, 2, 4, 8, ...): it built the
    providers, asked an unreachable one and noted it again for each count (4 identical notes for Vast.ai)."""
    import socket

    with socket.socket() as s:          # a port nothing listens on: the provider cannot be reached
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "config.yaml"
    config.write_text(f"providers:\n  vastai:\n    base_url: http://127.0.0.1:{port}\n    min_interval_s: 0\n"
                      "    retry_attempts: 1\n    retry_deadline_s: 1\n    timeout_s: 2\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCH_CONFIG": str(config), "VAST_API_KEY": "k-test"}
    out = subprocess.run([sys.executable, "-m", "orchestrator", "quote", "--live"], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    notes = [line for line in out.stderr.splitlines() if line.startswith("note: --live: vastai")]
    assert len(notes) == 1, out.stderr
    assert "H100-80G" in out.stdout          # the catalog's rows stay


def test_live_builds_only_the_providers_that_price_live_and_still_checks_every_section(
        clouds: FakeClouds, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--live`` (quote, plan) asks only the providers that price live: building GCP and Azure too imported their
    SDKs (seconds) for nothing. A bad section of one it does not build is still refused, as building it was."""
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config
    from orchestrator.config.providers import build_live_providers

    for name, value in clouds.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ORCH_CONFIG", str(clouds.write_config(tmp_path / "config.yaml")))
    built = build_live_providers(load_config())
    for p in built.values():
        p.close()  # type: ignore[attr-defined]
    assert sorted(built) == ["lambda", "runpod", "vastai"]        # gcp and azure configured, not built
    bad = {**clouds.sections(), "gcp": {**clouds.sections()["gcp"], "zonez": ["us-east5-a"]}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"owner": "tester", "providers": bad}))
    with pytest.raises(ConfigError, match="zonez"):
        build_live_providers(load_config())
