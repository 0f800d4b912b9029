"""Machines you own are offers: `orch quote` lists them, `orch plan` chooses them, `orch apply --launch`
reserves them. One configured SSH host (2x RTX 4090 at $0.35/h) served by a REAL sshd on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli.main import app
from providers.ssh.reservations import ReservationBook
from tests.support.sshd import Sshd, sshd  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parents[1]

MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: gamer-job
resources: {gpu: "RTX 4090", count: 2}
run: {launcher: command, command: nvidia-smi}
policies: {estimated_hours: 2}
"""


def ssh_section(tmp_path: Path, server: Sshd | None, **host: Any) -> dict[str, Any]:
    """providers.ssh with one host "gamer" (2x RTX 4090, $0.35/h); at ``server`` when given."""
    h: dict[str, Any] = {"name": "gamer", "address": "127.0.0.1", "gpu": "RTX 4090", "gpu_count": 2,
                         "price_hr": 0.35, "vcpus": 16, "memory_gb": 64}
    section: dict[str, Any] = {"state_dir": str(tmp_path / "ssh-state"), "known_hosts": str(tmp_path / "known")}
    if server is not None:
        h.update(port=server.port, user=server.user, host_key=server.host_key_line)
        section.update(key_path=str(server.client_key_path), connect_timeout_s=5.0, reconnect_deadline_s=0.0)
    h.update(host)
    section["hosts"] = [h]
    return section


def write_config(tmp_path: Path, server: Sshd | None = None, **host: Any) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"owner": "alice", "providers": {"ssh": ssh_section(tmp_path, server, **host)}}))
    return path


@pytest.fixture()
def env(tmp_path: Path, sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:  # noqa: F811
    values = {"ORCH_CONFIG": str(write_config(tmp_path, sshd)),
              "ORCH_DATABASE_URL": f"sqlite:///{tmp_path / 'orch.db'}",
              "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


def orch_subprocess(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=120)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_quote_lists_your_machine_marked_own(env: dict[str, str]) -> None:
    out = orch_subprocess(env, "quote", "--gpu", "RTX 4090", "--count", "2", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    mine = [r for r in rows if r["provider"] == "ssh"]
    assert len(mine) == 1 and mine[0]["instance_type"] == "gamer" and mine[0]["source"] == "own"
    assert mine[0]["price_hr"] == 0.35 and mine[0]["availability"] == "available"
    assert rows[0] == mine[0]                                  # the cheapest of every offer
    table = orch_subprocess(env, "quote", "--gpu", "RTX 4090", "--count", "2", "-p", "ssh")
    assert table.returncode == 0, table.stderr
    [row] = [line.split() for line in table.stdout.splitlines() if line.startswith("ssh ")]
    assert row[1] == "gamer" and "own" in row and "0.35" in row
    assert "your machines" in table.stdout


def test_plan_chooses_your_machine(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(MANIFEST)
    code, out, err = run("plan", str(tmp_path / "job.yaml"), "--json")
    assert code == 0, err
    [job] = json.loads(out)
    chosen = job["chosen"]
    assert (chosen["provider"], chosen["instance_type"], chosen["source"]) == ("ssh", "gamer", "own")
    assert chosen["estimated_total_usd"] == pytest.approx(0.70)


def test_apply_launch_reserves_your_machine_and_down_releases_it(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(MANIFEST)
    code, out, err = run("apply", str(tmp_path / "job.yaml"), "--launch", "--yes")
    assert code == 0, out + err
    assert "launched  gamer-job on ssh gamer" in out
    book = ReservationBook(tmp_path / "ssh-state")
    held = book.get("gamer")
    assert held is not None and held.owner == "alice" and held.job == "gamer-job"
    code, out, err = run("down", "gamer-job", "--yes", "--timeout", "30", "--poll", "0.05")
    assert code == 0, out + err
    assert book.get("gamer") is None


def test_a_reserved_machine_is_passed_over(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(MANIFEST)
    assert run("apply", str(tmp_path / "job.yaml"), "--launch", "--yes")[0] == 0
    (tmp_path / "other.yaml").write_text(MANIFEST.replace("gamer-job", "other-job"))
    code, out, _ = run("plan", str(tmp_path / "other.yaml"), "--json", "--configured")
    assert code == 1                                        # the only configured machine is taken
    [job] = json.loads(out)
    [mine] = [r for r in job["rejected"] if r["provider"] == "ssh"]
    assert [e["constraint"] for e in mine["excluded"]] == ["not-available"]
    run("down", "--all", "--yes", "--timeout", "30", "--poll", "0.05")


def test_a_free_machine_is_used_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No price set: 0 $/h, cheaper than anything a cloud sells, even a catalog spot offer."""
    monkeypatch.setenv("ORCH_CONFIG", str(write_config(tmp_path, None, price_hr=None, gpu="A100-80G", gpu_count=8)))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "job.yaml").write_text(MANIFEST.replace('"RTX 4090", count: 2', "A100-80G, count: 8"))
    code, out, err = run("plan", str(tmp_path / "job.yaml"), "--json")
    assert code == 0, err
    [job] = json.loads(out)
    assert (job["chosen"]["provider"], job["chosen"]["price_hr"]) == ("ssh", 0.0)


def test_a_bad_ssh_section_is_a_note_for_quote_and_an_error_for_live(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text(yaml.safe_dump({"providers": {"ssh": {"hosts": [{"name": "x", "address": "h", "gpu": "H1OO"}]}}}))
    env = {"ORCH_CONFIG": str(bad), "XDG_DATA_HOME": str(tmp_path / "data")}
    out = orch_subprocess(env, "quote", "--gpu", "A100-80G", "--count", "8", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)
    assert f"{bad}:5: providers.ssh.hosts[0].gpu: unknown GPU" in out.stderr and "own machines are not listed" in out.stderr
    out = orch_subprocess(env, "quote", "--gpu", "A100-80G", "--count", "8", "--live")
    assert out.returncode == 2 and f"{bad}:5: providers.ssh.hosts[0].gpu" in out.stderr and "Traceback" not in out.stderr


def test_the_apply_preview_gives_a_host_one_job_and_asks_each_jobs_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: the preview put two jobs on one host ($/h counted twice) and missed a job's own budget. It now
    simulates the launch step: the first job takes the host, the second waits; a job whose budget_usd the
    machine breaks waits, said so."""
    monkeypatch.setenv("ORCH_CONFIG", str(write_config(tmp_path)))
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")
    paths = []
    for name, extra in (("a-job", ""), ("b-job", ""), ("c-job", ", budget_usd: 0.5")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(MANIFEST.replace("gamer-job", name).replace("estimated_hours: 2", f"estimated_hours: 2{extra}"))
        paths.append(str(path))
    code, out, err = run("apply", paths[0], paths[1], "--dry-run", "--json")
    assert code == 0, err
    doc = json.loads(out)
    by = {launch["job"]: launch for launch in doc["launches"]}
    assert by["a-job"]["offer"]["provider"] == "ssh" and by["a-job"]["refused_by_budget"] is None
    assert "taken" in by["b-job"]["refused_by_budget"]
    assert doc["total_price_hr"] == pytest.approx(0.35)
    code, out, err = run("apply", paths[2], "--dry-run", "--json")
    assert code == 0, err
    [launch] = json.loads(out)["launches"]
    assert launch["refused_by_budget"].startswith("its own budget $0.50")
    assert json.loads(out)["total_price_hr"] == 0


def test_a_job_that_waits_is_not_an_apply_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: a job merely waiting (here: no offer on the configured host for its GPU) made apply exit 1."""
    monkeypatch.setenv("ORCH_CONFIG", str(write_config(tmp_path)))
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "job.yaml").write_text(MANIFEST.replace('"RTX 4090", count: 2', "A100-80G, count: 8"))
    code, out, err = run("apply", str(tmp_path / "job.yaml"), "--launch", "--yes", "--max-ticks", "2")
    assert code == 0, out + err
    assert "0 launched, 1 waits: gamer-job: no eligible offer" in out


def test_the_apply_preview_counts_what_a_relaunched_job_has_spent_against_its_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: the preview judged a job's own budget_usd as if it had spent nothing; a job that already spent
    part of it (a relaunch) has that much less left, as the engine's launch check counts it."""
    from datetime import UTC, datetime

    from orchestrator.store import open_store, repo

    monkeypatch.setenv("ORCH_CONFIG", str(write_config(tmp_path)))
    monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'orch.db'}")
    path = tmp_path / "job.yaml"        # the host at $0.35/h for 2 h: $0.70 of a $1.00 budget
    path.write_text(MANIFEST.replace("estimated_hours: 2", "estimated_hours: 2, budget_usd: 1.0"))
    code, out, err = run("apply", str(path), "--dry-run", "--json")
    assert code == 0, err
    [fresh] = json.loads(out)["launches"]
    assert fresh["refused_by_budget"] is None and fresh["offer"]["provider"] == "ssh"
    code, _, err = run("apply", str(path), "--no-launch", "--yes")
    assert code == 0, err
    store = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    try:
        with store.transaction() as tx:     # its first machine cost $0.50 before it was lost
            job = repo.require_job(tx, "gamer-job")
            t0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
            repo.record_spend(tx, job.id or 0, t0, t0.replace(hour=13), 0.5)
    finally:
        store.close()
    code, out, err = run("apply", str(path), "--dry-run", "--json")
    assert code == 0, err
    [again] = json.loads(out)["launches"]
    assert again["refused_by_budget"] == "its own budget $1.00 ($0.50 spent, $0.35/h for 2 h)"
    assert json.loads(out)["total_price_hr"] == 0
