"""``orch fit`` as a user runs it: a real process, the table within 80 columns, --json, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def orch(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)


def test_fit_table_fits_80_columns_and_lists_gpus_cheapest_first() -> None:
    out = orch("fit", "--params", "70B", "--method", "lora", "--precision", "bf16", "--seq-len", "4096",
               "--hours", "10")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    header = next(i for i, line in enumerate(lines) if line.startswith("GPU "))
    rows = [line for line in lines[header + 1:] if line and line.split()[0][0].isupper() and "-" in
            line.split()[0] and "/" in line]
    prices = [float(r.split()[-2]) for r in rows if r.split()[-2] != "-"]
    assert prices == sorted(prices) and len(prices) >= 5
    flat = " ".join(out.stdout.split())
    assert "cannot run the asked precision: " in flat and "no bf16" in flat   # V100/T4: no bf16


def test_a_note_about_some_rows_names_them() -> None:
    """"no NVLink machine in the catalog" was said of the table while its A100-40G row showed nvlink."""
    out = orch("fit", "--params", "70B", "--method", "lora", "--precision", "bf16", "--seq-len", "4096")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("GPU "))
    link = {line.split()[0]: line.split()[4] for line in lines[header + 1:] if "/" in line and "x " not in line
            and len(line.split()) > 5 and line.split()[4] in ("nvlink", "pcie", "-")}
    flat = " ".join(out.stdout.split())
    start = flat.index("no NVLink machine in the catalog: PCIe slows the per-layer gathers of sharding: ")
    named = [g for g in link if g in flat[start:].split(" Prices:")[0]]
    assert named and all(link[g] == "pcie" for g in named), (named, link)


def test_fit_json_options() -> None:
    out = orch("fit", "--model", "llama-3-8b", "--method", "qlora", "--json", "--hours", "3")
    assert out.returncode == 0, out.stderr
    options = json.loads(out.stdout)
    assert {"gpu", "count", "nodes", "per_gpu_gb", "fits", "offer", "sharding", "interconnect"} <= set(options[0])
    first = options[0]
    assert first["fits"] and first["count"] == 1 and first["nodes"] == 1 and first["offer"]["price_hr"] > 0
    assert first["estimated_cost_usd"] == pytest.approx(first["price_hr"] * 3, abs=0.01)
    fitting = [o for o in options if o["fits"] and o["price_hr"] is not None]
    assert [o["price_hr"] for o in fitting] == sorted(o["price_hr"] for o in fitting)


def test_fit_advises_nvlink_only_when_sharded_over_more_than_two() -> None:
    options = json.loads(orch("fit", "--params", "70B", "--json").stdout)
    for o in options:
        if not o["fits"]:
            continue
        if o["sharding"] != "ddp" and o["count"] > 2:
            assert o["interconnect"] == "nvlink"
        elif o["count"] > 1:
            assert o["interconnect"] == "pcie ok"
    small = json.loads(orch("fit", "--params", "1B", "--gpu", "A100-80G", "--json").stdout)
    assert small[0]["count"] == 1 and small[0]["sharding"] == "ddp"


@pytest.mark.parametrize(("args", "needle"), [
    (["--params", "-7B"], "negative"),
    (["--params", "0"], "must be positive"),
    (["--params", "1e400"], "is not a finite number"),
    (["--params", "nan"], "is not a parameter count"),
    (["--params", "1e30"], "is over orch's limit, 1000T"),
    (["--params", "1001T"], "is over orch's limit, 1000T"),
    (["--params", "7B", "--hours", "nan"], "--hours must be a finite number"),
    (["--params", "7B", "--hours", "0"], "--hours must be more than 0"),
    (["--params", "7B", "--hours", "1e300"], "--hours must be at most 87600"),   # else a 300-digit $ EST
    (["--params", "7B", "--headroom", "0.999"], "--headroom is a fraction of GPU memory kept free, 0 to 0.9"),
    (["--params", "7B", "--method", "lorra"], "did you mean lora"),
    (["--params", "7B", "--precision", "fp4"], "unknown precision"),
    (["--model", "llama-9-7b"], "unknown model"),
    (["--params", "7B", "--micro-batch", "0"], "--micro-batch must be 1 or more"),
    (["--params", "7B", "--offload", "optimizer", "--sharding", "ddp"], "needs ZeRO"),
    ([], "say how big the model is"),
    (["--params", "7B", "--gpu", "H1OO"], "unknown GPU"),
    (["--params", "7B", "--max-nodes", "0"], "--max-nodes must be 1 to 256 (the most machines orch runs a job on)"),
    (["--params", "7B", "--max-nodes", "257"], "--max-nodes must be 1 to 256"),
    (["--params", "1000T", "--max-nodes", str(10**9)], "a job on), got 1000000000"),
])
def test_bad_input_is_one_line_exit_2(args: list[str], needle: str) -> None:
    out = orch("fit", *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert needle in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_largest_size_allowed_is_answered_nothing_fits() -> None:
    out = orch("fit", "--params", "1000T")
    assert out.returncode == 1, out.stderr
    assert "nothing fits within 8 machines" in out.stderr and "Traceback" not in out.stderr


def test_the_most_machines_allowed_are_searched_and_answered() -> None:
    out = orch("fit", "--params", "1000T", "--max-nodes", "256")
    assert out.returncode == 1, out.stderr
    assert "nothing fits within 256 machines" in out.stderr and "--max-nodes" not in out.stderr


def test_impossible_fit_exits_1_with_the_nearest_relaxation() -> None:
    out = orch("fit", "--params", "7B", "--gpu", "RTX4090", "--sharding", "ddp")
    assert out.returncode == 1
    assert "nothing fits" in out.stderr
    assert "fits with --method qlora on 1x RTX4090-24G" in out.stderr
    assert "needs ZeRO-3 across 8 GPUs (--sharding zero3)" in out.stderr
    assert "Traceback" not in out.stderr
    # What was estimated (200 columns in one line) wraps; each relaxation starts its own line.
    lines = out.stderr.splitlines()
    assert max(len(line) for line in lines) <= 80, out.stderr
    assert "sharding ddp; seq 2048 x micro-batch 1, checkpointing on" in " ".join(out.stderr.split())
    assert "  fits with --method lora on 1x RTX4090-24G ($0.40/h)" in lines
