"""``orch catalog refresh`` / ``status`` and ``orch quote`` after a refresh, as a user runs them (real processes,
sources on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest

from tests.support.recorded_sources import RecordedSources

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def sources() -> Iterator[RecordedSources]:
    s = RecordedSources(published=format_datetime(datetime.now(UTC) - timedelta(hours=3, minutes=30), usegmt=True))
    yield s
    s.close()


@pytest.fixture
def env(sources: RecordedSources, tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "config.yaml"
    config.write_text(
        "catalog:\n"
        f"  gpuhunt_url: {sources.base}/gpuhunt\n"
        f"  azure_prices_url: {sources.base}/azure/prices\n"
        f"  vast_url: {sources.base}/vast\n"
        f"  runpod_url: {sources.base}/runpod/graphql\n"
        f"  lambda_url: {sources.base}/lambda\n"
        "  http_timeout_s: 5\n"
        "  refresh_every: 6h\n")
    return {**os.environ, "PYTHONPATH": str(ROOT), "ORCH_CONFIG": str(config), "LAMBDA_API_KEY": "k-test",
            "XDG_DATA_HOME": str(tmp_path / "data")}


def orch(env: dict[str, str], *args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    run_env = dict(env)
    if columns:
        run_env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=run_env, cwd=ROOT, timeout=120)


def test_refresh_then_quote_shows_the_refreshed_prices_with_their_age(env: dict[str, str]) -> None:
    out = orch(env, "catalog", "refresh", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {p["provider"]: p["rows"] for p in doc["providers"]} == {
        "aws": 27, "gcp": 26, "azure": 18, "runpod": 10, "vastai": 13, "lambda": 14}
    assert "refreshing all providers" in out.stderr and "aws: gpuhunt…" in out.stderr     # progress on stderr

    quoted = json.loads(orch(env, "quote", "--gpu", "A100-80G", "--count", "4", "--json").stdout)
    azure = [r for r in quoted if r["provider"] == "azure" and r["region"] == "westus3" and r["market"] == "spot"]
    assert [r["price_hr"] for r in azure] == [1.7502]                          # the refreshed price, not 1.61612
    assert azure[0]["price_source"] == "gpuhunt azure 20261202-8841"
    assert 3 * 3600 <= azure[0]["price_age_s"] < 4 * 3600 and not azure[0]["price_as_of_approximate"]
    assert {r["provider"] for r in quoted} == {"azure", "gcp", "runpod", "vastai"}
    assert not [r for r in quoted if r["price_as_of_approximate"]]            # no shipped row is left

    table = orch(env, "quote", "--gpu", "A100-80G", "--count", "4", columns=80)
    assert table.returncode == 0, table.stderr
    westus3 = [line for line in table.stdout.splitlines() if "westus3" in line and "spot" in line]
    assert westus3 and westus3[0].split()[-1] == "3h"
    assert "Refreshed prices: azure, gcp, runpod, vastai." in " ".join(table.stdout.split())
    assert "Older than a day" not in table.stdout


def test_refresh_failure_exits_1_names_the_provider_and_keeps_its_rows(env: dict[str, str],
                                                                      sources: RecordedSources) -> None:
    assert orch(env, "catalog", "refresh", "--provider", "gcp").returncode == 0
    path = Path(env["XDG_DATA_HOME"]) / "orch" / "catalog" / "offers-gcp.csv"
    before = path.read_bytes()
    sources.break_route("/gpuhunt/gcp/", "500")
    out = orch(env, "catalog", "refresh", "-p", "gcp", "-p", "vast")
    assert out.returncode == 1
    assert "refresh failed for gcp" in out.stderr and "Traceback" not in out.stderr
    assert "HTTP 500" in out.stdout and "vastai   refreshed" in out.stdout
    assert path.read_bytes() == before
    status = json.loads(orch(env, "catalog", "status", "--json").stdout)
    gcp = next(r for r in status if r["provider"] == "gcp")
    assert gcp["origin"] == "refreshed" and gcp["outcome"] == "failed" and "HTTP 500" in gcp["error"]


@pytest.mark.parametrize(("args", "needle"), [
    (["--provider", "ssh"], "ssh has no price list to refresh"),
    (["--provider", "awz"], "did you mean aws"),
])
def test_refresh_bad_input_exits_2(env: dict[str, str], args: list[str], needle: str) -> None:
    out = orch(env, "catalog", "refresh", *args)
    assert out.returncode == 2 and needle in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_an_unknown_provider_to_refresh_is_told_only_the_refreshable_ones(env: dict[str, str]) -> None:
    out = orch(env, "catalog", "refresh", "--provider", "nope")
    assert out.returncode == 2 and "unknown provider 'nope'" in out.stderr
    assert "refreshable: aws, gcp, azure, runpod, vastai, lambda" in out.stderr and "ssh" not in out.stderr


def test_bad_catalog_config_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    Path(env["ORCH_CONFIG"]).write_text("catalog:\n  refresh_every: often\n")
    out = orch(env, "catalog", "refresh")
    assert out.returncode == 2 and "catalog.refresh_every: not a duration" in out.stderr
    Path(env["ORCH_CONFIG"]).write_text("catalog:\n  refresh_evry: 6h\n")
    assert "catalog.refresh_evry: unknown key" in orch(env, "catalog", "refresh").stderr


def test_quote_history_shows_the_trend_per_provider(env: dict[str, str], sources: RecordedSources) -> None:
    assert orch(env, "catalog", "refresh", "-p", "vastai").returncode == 0
    answer = json.loads((ROOT / "tests" / "fixtures" / "vast-bundles" / "bundles-on-demand.json").read_text())
    for ask in answer["offers"]:
        ask["dph_base"] = round(ask["dph_base"] * 1.5, 4)
    sources.overrides["/vast/bundles/"] = json.dumps(answer).encode()
    assert orch(env, "catalog", "refresh", "-p", "vastai").returncode == 0
    out = orch(env, "quote", "--history", "--gpu", "4090:1", columns=80)
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("vastai") and "on-demand" in line)
    _, _, first, last, change, *_ = line.split()
    assert float(last) > float(first) and change.startswith("+")
    assert all(len(line) <= 80 for line in out.stdout.splitlines())
    assert orch(env, "quote", "--history", "--gpu", "B200").returncode == 1
    assert "needs --gpu" in orch(env, "quote", "--history").stderr


def test_status_fits_80_columns(env: dict[str, str], sources: RecordedSources) -> None:
    """The table, a provider's last error and the stale providers' line (84 columns for the shipped catalog)
    stay within 80 columns."""
    sources.break_route("/gpuhunt/gcp/", "500")
    assert orch(env, "catalog", "refresh", "-p", "gcp").returncode == 1
    out = orch(env, "catalog", "status")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "last error" in out.stdout and "older than a day (run `orch catalog refresh`): aws, gcp" in out.stdout
    assert max(len(line) for line in lines) <= 80, "\n".join(line for line in lines if len(line) > 80)


def test_the_state_files_outcome_is_read_as_its_member_and_anything_else_as_none() -> None:
    from orchestrator.app.catalog_status import _outcome
    from providers.catalog.refresh.model import Outcome

    assert _outcome("failed") is Outcome.FAILED and _outcome("refreshed") is Outcome.REFRESHED
    for junk in ("Failed", "ok", 1, None, ["failed"]):
        assert _outcome(junk) is None, junk
