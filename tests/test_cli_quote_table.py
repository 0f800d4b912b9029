"""The quote table at a terminal's width (``$COLUMNS``), GPU:COUNT and short names, the GPU list, grouping."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRICE = re.compile(r"^\d+\.\d\d$")


def orch(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("COLUMNS", None)
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)


def table(out: str) -> tuple[list[str], list[list[str]]]:
    """(header cells, data rows) of the first table in ``out``, split on runs of 2+ spaces."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(("PROVIDER", "GPU")))
    rows = []
    for line in lines[start + 1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) < 3:
            break
        rows.append(cells)
    return re.split(r"\s{2,}", lines[start].strip()), rows


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("args", [
    ["--gpu", "A100-80G", "--count", "4"],
    ["--gpu", "H100:8"],
    ["--gpu", "4090", "--all-regions"],
    ["--gpu", "A100-80G", "--count", "4", "--nodes", "2"],
    [],
])
def test_no_line_exceeds_the_width_and_no_price_is_cut(width: int, args: list[str]) -> None:
    out = orch("quote", *args, columns=width)
    assert out.returncode == 0, out.stderr
    assert all(len(line) <= width for line in out.stdout.splitlines()), out.stdout
    assert "0.…" not in out.stdout and "….." not in out.stdout
    header, rows = table(out.stdout)
    money = [i for i, h in enumerate(header) if h.startswith("$/") or h == "FROM $/GPU-H"]
    assert money and rows
    for row in rows:
        assert all(PRICE.match(row[i]) for i in money), row


def test_at_80_columns_the_essentials_stay() -> None:
    out = orch("quote", "--gpu", "A100-80G", "--count", "4", columns=80)
    header, rows = table(out.stdout)
    assert {"PROVIDER", "REGION", "MARKET", "$/H", "$/GPU-H", "AGE"} <= set(header)
    assert all(row[header.index("AGE")].startswith("~") for row in rows)      # shipped: approximate ages
    wide = orch("quote", "--gpu", "A100-80G", "--count", "4", "--wide", columns=80)
    wide_header, _ = table(wide.stdout)
    assert {"VRAM", "vCPU/GPU", "RAM/GPU", "LINK", "FABRIC", "SOURCE", "INSTANCE", "GPUS"} <= set(wide_header)


def test_identical_offers_are_grouped_across_regions() -> None:
    grouped = orch("quote", "--gpu", "A100-80G", "--count", "4", "--provider", "runpod", columns=200)
    _, rows = table(grouped.stdout)
    assert len(rows) == 1 and "3 regions" in rows[0]
    expanded = orch("quote", "--gpu", "A100-80G", "--count", "4", "--provider", "runpod", "--all-regions",
                    columns=200)
    _, rows = table(expanded.stdout)
    assert len(rows) == 3 and {r[2] for r in rows} == {"CA/CA-MTL-1", "SE/EU-SE-1", "US/US-CA-1"}


def test_gpu_count_form_and_short_names() -> None:
    def offers(*args: str) -> list[dict[str, object]]:
        return [{k: v for k, v in r.items() if k != "price_age_s"} for r in json.loads(orch("quote", *args).stdout)]

    colon = offers("--gpu", "H100:8", "--json")
    assert colon == offers("--gpu", "H100", "--count", "8", "--json")
    assert colon and all(r["gpu_count"] == 8 for r in colon)
    short = json.loads(orch("quote", "--gpu", "4090", "--json").stdout)
    assert short and {r["gpu"] for r in short} == {"RTX4090-24G"}
    both = orch("quote", "--gpu", "H100:8", "--count", "4")
    assert both.returncode == 2 and "contradicts" in both.stderr


def test_an_ambiguous_short_name_says_did_you_mean() -> None:
    out = orch("quote", "--gpu", "100")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "ambiguous GPU '100' (did you mean" in out.stderr and "A100-80G" in out.stderr and "H100-80G" in out.stderr


@pytest.mark.parametrize("value", ["", ",", " , "])
def test_a_gpu_flag_naming_no_gpu_is_refused_not_read_as_no_flag(value: str) -> None:
    # `--gpu "$GPU"` with GPU unset: the user asked about a GPU; the list of every GPU would hide the mistake.
    out = orch("quote", "--gpu", value)
    assert out.returncode == 2 and out.stdout == ""
    assert "--gpu names no GPU" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_no_gpu_lists_gpus_with_cheapest_price_and_providers() -> None:
    doc = json.loads(orch("quote", "--json").stdout)
    by = {g["gpu"]: g for g in doc}
    assert {"A100-80G", "H100-80G", "RTX4090-24G"} <= set(by)
    a100 = by["A100-80G"]
    assert a100["vram_gb"] == 80 and "azure" in a100["providers"] and a100["offers"] > 10
    everything = json.loads(orch("quote", "--gpu", "A100-80G", "--count", str(a100["gpu_counts"][0]), "--json").stdout)
    assert everything
    prices = [g["cheapest_price_per_gpu_hr"] for g in doc]
    assert prices == sorted(prices)
    spot_only = json.loads(orch("quote", "--spot", "--provider", "aws", "--json").stdout)
    assert spot_only and all(g["providers"] == ["aws"] and g["cheapest_market"] == "spot" for g in spot_only)


def test_rule_of_thumb_flags_only_offers_below_the_minimum() -> None:
    rows = json.loads(orch("quote", "--gpu", "A100-80G", "--count", "4", "--json").stdout)
    assert rows and not [r for r in rows if r["flags"]]          # generous hyperscaler machines are not flagged
    vast = json.loads(orch("quote", "--gpu", "H200", "--provider", "vast", "--count", "8", "--json").stdout)
    assert vast and all(r["vcpus"] is None and r["vcpus_per_gpu"] is None for r in vast)   # shipped Vast: unknown


def test_the_gpu_list_agrees_with_each_gpu_quote_on_the_shipped_catalog() -> None:
    """Issue 31: the list read only 1-GPU machines (COUNTS always 1, V100-32G and B200 missing, H100 "from 1.87"
    where 8-GPU spot machines cost 1.28 a GPU-hour). Now every GPU of the catalog is listed, and each line's
    counts, cheapest $/GPU-h and providers are exactly what `--gpu G --count N` finds, per count."""
    from typer.testing import CliRunner

    from orchestrator.cli.main import app
    from orchestrator.offers.gpu_list import machine_counts
    from providers.catalog import load_catalog

    runner = CliRunner()

    def run_json(*args: str) -> list[dict[str, object]]:
        done = runner.invoke(app, ["quote", *args, "--json"])
        return json.loads(done.stdout) if done.exit_code == 0 else []

    catalog = load_catalog().offers
    listed = {g["gpu"]: g for g in run_json()}
    assert set(listed) == {o.gpu for o in catalog}
    counts = machine_counts(o.gpu_count for o in catalog)
    for gpu, line in listed.items():
        per_count = {c: run_json("--gpu", str(gpu), "--count", str(c)) for c in counts}
        rows = [r for found in per_count.values() for r in found]
        assert line["gpu_counts"] == [c for c, found in per_count.items() if found], gpu
        assert line["cheapest_price_per_gpu_hr"] == min(r["price_per_gpu_hr"] for r in rows), gpu
        assert line["providers"] == sorted({r["provider"] for r in rows}), gpu
        assert line["offers"] == len(rows), gpu


def test_the_gpu_list_for_several_nodes_lists_what_such_quotes_find() -> None:
    """`orch quote --nodes 2` listed RTX 4090s (RunPod, Vast.ai) that `--gpu 4090 --nodes 2` does not offer: orch
    launches single machines there. The list reads --nodes as the per-GPU quote does."""
    from typer.testing import CliRunner

    from orchestrator.cli.main import app
    from orchestrator.offers.gpu_list import machine_counts
    from providers.catalog import load_catalog
    from providers.registry import launches_multi_node

    runner = CliRunner()

    def run_json(*args: str) -> list[dict[str, object]]:
        done = runner.invoke(app, ["quote", *args, "--nodes", "2", "--json"])
        return json.loads(done.stdout) if done.exit_code == 0 else []

    listed = {g["gpu"]: g for g in run_json()}
    assert "RTX4090-24G" not in listed and "H100-80G" in listed
    assert all(launches_multi_node(str(p)) for g in listed.values() for p in g["providers"])  # type: ignore[union-attr]
    counts = machine_counts(o.gpu_count for o in load_catalog().offers)
    for gpu in ("H100-80G", "A100-80G", "L4-24G"):
        rows = [r for c in counts for r in run_json("--gpu", gpu, "--count", str(c))]
        assert listed[gpu]["providers"] == sorted({r["provider"] for r in rows}), gpu
        assert listed[gpu]["cheapest_price_per_gpu_hr"] == min(r["price_per_gpu_hr"] for r in rows), gpu


def test_wide_shows_the_fabric_between_the_nodes() -> None:
    """Per offer, the node-to-node fabric and its bandwidth; for several nodes, one orch does not attach says tcp."""
    out = orch("quote", "--gpu", "H100-80G", "--count", "8", "--nodes", "2", "--wide", "--all-regions",
               columns=400).stdout
    header, rows = table(out)
    fabric, instance = header.index("FABRIC"), header.index("INSTANCE")
    seen = {r[instance]: r[fabric] for r in rows}
    assert seen.get("p5.48xlarge", "efa 3200G") == "efa 3200G"
    assert any(v.startswith("efa ") for v in seen.values()), seen
