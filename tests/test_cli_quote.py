"""``orch quote`` as a user runs it: a real process, exit codes, one-line errors, no heavy imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("boto3", "botocore", "google", "azure", "sqlmodel", "sqlalchemy", "alembic", "paramiko", "psycopg",
         "orchestrator.store", "apscheduler", "jinja2", "orchestrator.console")


def orch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=full, cwd=ROOT, timeout=60)


def test_quote_table_lists_offers_cheapest_first() -> None:
    out = orch("quote", "--gpu", "A100-80G", "--count", "4")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("4×A100-80G")
    assert lines[1].split()[:3] == ["PROVIDER", "INSTANCE", "REGION"]
    assert {"azure", "gcp", "runpod"} <= {line.split()[0] for line in lines[2:] if line.strip()}
    assert "Shipped list prices (approximate dates, not live)" in out.stdout


def test_quote_json_is_a_list_sorted_by_total_price() -> None:
    out = orch("quote", "--gpu", "a100:80gb", "--count", "4", "--nodes", "2", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert rows and all(r["gpu"] == "A100-80G" and r["gpu_count"] == 4 and r["nodes"] == 2 for r in rows)
    totals = [r["total_price_hr"] for r in rows]
    assert totals == sorted(totals)
    assert all(r["total_price_hr"] == pytest.approx(2 * r["price_hr"]) for r in rows)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu", "A100-90G"], "did you mean A100-80G"),
        (["--gpu", "A100-80G", "--count", "0"], "--count must be 1 or more"),
        (["--gpu", "A100-80G", "--count", "-2"], "--count must be 1 or more"),
        (["--gpu", "A100-80G", "--nodes", "0"], "--nodes must be 1 or more"),
        # As a manifest's resources.nodes: not a $/h column of 10^8 machines.
        (["--gpu", "A100-80G", "--nodes", "99999999"], "--nodes must be at most 256"),
        (["--gpu", "A100-80G", "--nodes", "257", "--json"], "--nodes must be at most 256"),
        (["--gpu", "A100-80G", "--max-price", "-1"], "--max-price must not be negative"),
        (["--gpu", "A100-80G", "--provider", "awz"], "did you mean aws"),
        (["--gpu", "A100-80G", "--region", "us-[east"], "malformed region glob"),
    ],
)
def test_bad_input_exits_2_with_one_clear_line(args: list[str], needle: str) -> None:
    out = orch("quote", *args)
    assert out.returncode == 2
    assert needle in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_no_match_exits_1_with_suggestions() -> None:
    out = orch("quote", "--gpu", "H100", "--count", "3")
    assert out.returncode == 1
    assert "no offer matches 3×H100-80G" in out.stderr
    assert "--count 2" in out.stderr and "--count 4" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("own_machines", [False, True], ids=["no-config", "ssh-hosts-configured"])
def test_quote_and_help_import_no_sdk_and_no_database(tmp_path: Path, own_machines: bool) -> None:
    """Also with SSH hosts in the config: they are listed from their settings (pydantic), never over paramiko."""
    config = tmp_path / "config.yaml"
    if own_machines:
        config.write_text("providers:\n  ssh:\n    hosts:\n      - {name: box, address: 10.0.0.5, gpu: A100-80G, "
                          "gpu_count: 4, price_hr: 1.5}\n")
    code = (
        "import sys, contextlib, io\n"
        "from orchestrator.cli.main import app\n"
        "out = io.StringIO()\n"
        "for argv in (['quote','--gpu','A100-80G','--count','4','--json'], ['quote','--gpu','H100'], ['--help'],\n"
        "             ['fit','--params','7B','--json'], ['fit','--model','llama-3-70b','--method','lora']):\n"
        "    with contextlib.redirect_stdout(out):\n"        "        try:\n"
        "            app(argv, standalone_mode=False)\n"
        "        except SystemExit:\n"
        "            pass\n"
        f"heavy = {HEAVY!r}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n"
        "print('own' if '\"source\": \"own\"' in out.getvalue() else 'none')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCH_CONFIG": str(config), "XDG_DATA_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    modules, own = out.stdout.strip().splitlines()
    assert modules == "[]"
    assert own == ("own" if own_machines else "none")


def test_the_gpu_list_notes_an_unreadable_config_once(tmp_path: Path) -> None:
    """The GPU list asks the offer sources once per GPU count; a bad providers section was noted each time
    (seven identical lines on stderr)."""
    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  ssh:\n    hosts:\n      - {name: box, address: 10.0.0.5, gpu: A100-80G, "
                      "gpu_count: 1, host_key: 'not a key'}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCH_CONFIG": str(config)}
    out = subprocess.run([sys.executable, "-m", "orchestrator", "quote"], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    notes = [line for line in out.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "config.yaml:4: providers.ssh.hosts[0].host_key" in notes[0], out.stderr


def test_quote_history_without_history_says_so_within_80_columns() -> None:
    out = orch("quote", "--history", "--gpu", "B200", "--gpu", "H100")
    assert out.returncode == 1 and out.stdout == ""
    assert " ".join(out.stderr.split()).startswith("no price history for B200-180G, H100-80G yet: each `orch "
                                                   "catalog refresh`"), out.stderr
    assert max(len(line) for line in out.stderr.splitlines()) <= 80, out.stderr


def test_one_offer_and_one_machine_are_singular() -> None:
    out = orch("quote", "--gpu", "A100-80G", "--all-regions", "--limit", "1", env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    assert "1 offer." in out.stdout.splitlines() and "1 offers" not in out.stdout
    out = orch("fit", "--params", "1T", "--max-nodes", "1", "--gpu", "T4")
    assert out.returncode == 1 and out.stderr.startswith("error: nothing fits within 1 machine: "), out.stderr


def test_one_plural_helper_agrees_nouns_with_numbers() -> None:
    from orchestrator.words import plural

    assert [plural(n, "offer") for n in (0, 1, 2)] == ["0 offers", "1 offer", "2 offers"]
    assert plural(1, "match", "matches") == "1 match" and plural(3, "match", "matches") == "3 matches"
    # ... and the CLI spells no plural inline ({n} offer{'' if n == 1 else 's'}) beside it.
    import re

    inline = re.compile(r"""if [^"'\n]+ [!=]= 1 else ['"]s?['"]""")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "orchestrator").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if inline.search(line)]
    assert found == []


def test_no_message_hedges_a_plural_with_s_in_brackets() -> None:
    """``3 machine(s)``: orchestrator/words.py's ``plural`` says ``1 machine`` and ``2 machines`` instead, in every
    layer (the CLI, the engine's events, the daemon's log lines). Only the strings are read: ``f(s)`` is code."""
    import re
    import tokenize

    hedged = re.compile(r"[A-Za-z]\((?:s|es)\)")
    kinds = {tokenize.STRING} | ({tokenize.FSTRING_MIDDLE} if hasattr(tokenize, "FSTRING_MIDDLE") else set())
    found = []
    for path in sorted([*(ROOT / "orchestrator").rglob("*.py"), *(ROOT / "providers").rglob("*.py")]):
        with path.open("rb") as f:
            for tok in tokenize.tokenize(f.readline):
                text = tok.string.replace("http(s)", "").replace("HTTP(S)", "")
                if tok.type in kinds and hedged.search(text):
                    found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {hedged.search(text)[0]}")
    assert found == []


def test_the_gpu_list_says_own_for_a_machine_of_yours(tmp_path: Path) -> None:
    """As the quote's MARKET column does (it said on-demand)."""
    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  ssh:\n    hosts:\n      - {name: box, address: 10.0.0.5, gpu: A100-80G, "
                      "gpu_count: 2, price_hr: 0.01}\n")
    out = orch("quote", "--provider", "ssh", env={"ORCH_CONFIG": str(config), "XDG_DATA_HOME": str(tmp_path),
                                                  "COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    [row] = [line.split() for line in out.stdout.splitlines() if line.startswith("A100-80G")]
    assert row[3] == "own" and row[-1] == "ssh"


@pytest.mark.parametrize("hosts", [1, 2])
def test_the_gpu_list_for_several_nodes_counts_your_machines(tmp_path: Path, hosts: int) -> None:
    """One host is one node: with one A100-40G host, `--nodes 2` lists no 'own' A100-40G, as `--gpu A100-40G
    --nodes 2` prices none; with two such hosts both list them."""
    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  ssh:\n    hosts:\n" + "".join(
        f"      - {{name: box{i}, address: 10.0.0.{i + 5}, gpu: A100-40G, gpu_count: 1}}\n" for i in range(hosts)))
    env = {"ORCH_CONFIG": str(config), "XDG_DATA_HOME": str(tmp_path), "COLUMNS": "80"}
    listed = orch("quote", "--nodes", "2", "--json", env=env)
    quoted = orch("quote", "--gpu", "A100-40G", "--nodes", "2", "--json", env=env)
    assert listed.returncode == 0 and quoted.returncode == 0, listed.stderr + quoted.stderr
    [a100] = [g for g in json.loads(listed.stdout) if g["gpu"] == "A100-40G"]
    own_quoted = any(r["provider"] == "ssh" for r in json.loads(quoted.stdout))
    assert own_quoted == (hosts == 2)
    assert ("ssh" in json.dumps(a100)) == own_quoted, a100
