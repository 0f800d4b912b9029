"""``orch providers`` with no credentials at all, and with a broken or SDK-less configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "GOOGLE_"))}
    env.update(PYTHONPATH=str(ROOT))
    env.pop("RUNPOD_API_KEY", None), env.pop("VAST_API_KEY", None), env.pop("LAMBDA_API_KEY", None)
    if config is not None:
        env["ORCH_CONFIG"] = str(config)
    return subprocess.run([sys.executable, "-m", "orchestrator", "providers", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=60)


def test_no_config_lists_every_provider_not_configured_with_the_fix() -> None:
    out = run("--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["provider"] for r in rows] == ["aws", "gcp", "azure", "runpod", "vastai", "lambda", "ssh"]
    assert all(r["status"] == "not configured" for r in rows)
    by = {r["provider"]: r["detail"] for r in rows}
    assert "aws configure" in by["aws"] and "RUNPOD_API_KEY" in by["runpod"] and "az login" in by["azure"]


def test_table_output_and_bad_config_is_one_clear_line(tmp_path: Path) -> None:
    out = run()
    assert out.returncode == 0 and "not configured" in out.stdout
    bad = tmp_path / "config.yaml"
    bad.write_text("providers:\n  awz: {}\n")
    out = run(config=bad)
    assert out.returncode == 2
    assert "did you mean aws" in out.stderr and "Traceback" not in out.stderr


def test_a_bad_provider_section_is_named_at_its_line_in_the_config(tmp_path: Path) -> None:
    """``config error``'s detail reads like every other command's refusal of the section (file:line, the field
    as written, no pydantic "Value error, " prefix), not ``providers.ssh.hosts.0.host_key: Value error, ...``."""
    config = tmp_path / "config.yaml"
    config.write_text("providers:\n  ssh:\n    hosts:\n      - name: box\n        address: 10.0.0.5\n"
                      "        gpu: A100-80G\n        host_key: 'not a key'\n")
    out = run("--json", config=config)
    assert out.returncode == 0, out.stderr
    ssh = {r["provider"]: r for r in json.loads(out.stdout)}["ssh"]
    assert ssh["status"] == "config error"
    assert ssh["detail"].startswith(f"{config}:7: providers.ssh.hosts[0].host_key: host_key must be"), ssh
    assert "Value error" not in ssh["detail"]


def test_own_hosts_are_ready_without_claiming_they_were_reached(tmp_path: Path) -> None:
    """An SSH host at a port nothing listens on read "ready: credentials accepted": orch only read the key file."""
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    config = tmp_path / "config.yaml"
    config.write_text(f"providers:\n  ssh:\n    key_path: {key}\n    hosts:\n      - {{name: box, address: 127.0.0.1, "
                      "port: 1, gpu: A100-80G}\n")
    out = run("--json", config=config)
    assert out.returncode == 0, out.stderr
    ssh = {r["provider"]: r for r in json.loads(out.stdout)}["ssh"]
    assert ssh["status"] == "ready" and "credentials accepted" not in ssh["detail"]
    assert ssh["detail"] == "key readable; 1 host declared, not contacted (`orch smoke --provider ssh` reaches them)"
