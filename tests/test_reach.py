"""How to reach a node (orchestrator/config/reach.py): `orch plan` says it per job, the console's job page per live
machine, and neither claims a port is open that the settings keep closed."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.config.reach import reach_hint, reach_line

EXAMPLE = Path(__file__).parent.parent / "examples" / "torchrun-ddp.yaml"


@pytest.mark.parametrize("provider", ["aws", "gcp", "azure"])
def test_a_cloud_node_is_closed_by_default_and_the_hint_says_how_to_open_it(provider: str) -> None:
    from providers.registry import load_settings

    closed = reach_hint(provider, load_settings(provider, {}))
    assert "no port is open" in closed and f"providers.{provider}.ssh_ingress_cidrs" in closed
    assert "console" in closed or "Bastion" in closed, "the cloud's own way in, which needs no open port"
    assert reach_hint(provider, None) == closed, "no settings: the cloud's defaults"
    opened = reach_hint(provider, load_settings(provider, {"ssh_ingress_cidrs": ["203.0.113.7/32"]}))
    assert "from 203.0.113.7/32" in opened and "no port is open" not in opened
    azure = load_settings("azure", {"admin_username": "ops", "ssh_ingress_cidrs": ["198.51.100.0/24"]})
    assert reach_hint("azure", azure).startswith("reach a node: ssh ops@")


@pytest.mark.parametrize(("provider", "user"), [("aws", "ubuntu"), ("gcp", "root"), ("azure", "orch")])
def test_the_hint_names_the_user_the_clouds_settings_log_in_as(provider: str, user: str) -> None:
    from providers.registry import load_settings

    assert f"ssh {user}@<its public address>" in reach_hint(provider, load_settings(provider, {}))


def test_settings_that_open_no_ssh_port_are_refused_for_a_cloud_hint() -> None:
    from providers.registry import load_settings

    with pytest.raises(TypeError, match="open no SSH port"):
        reach_hint("aws", load_settings("lambda", {}))


def test_own_hosts_and_pod_clouds() -> None:
    assert "providers.ssh" in reach_hint("ssh", None)
    assert "RunPod console" in reach_hint("runpod", None)
    assert reach_line("ssh", public_ip=None, private_ip="10.1.2.3", ssh_user="me", ssh_port=2222) == \
        "ssh -p 2222 me@10.1.2.3"


def test_a_live_machines_line() -> None:
    line = reach_line("aws", public_ip="54.1.2.3", ssh_user="ubuntu", ssh_port=22)
    assert line.startswith("ssh ubuntu@54.1.2.3 (from an address in providers.aws.ssh_ingress_cidrs)")
    assert reach_line("gcp", public_ip=None, ssh_user="root", ssh_port=None).startswith("no public address: ")


def test_orch_plan_says_how_to_reach_a_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli.main import app

    config = tmp_path / "config.yaml"
    config.write_text("owner: alice\nproviders:\n  gcp: {project: p}\n")
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    result = CliRunner().invoke(app, ["plan", str(EXAMPLE), "--configured"], catch_exceptions=False)
    text = " ".join(result.stdout.split())
    assert "note: reach a node: no port is open from outside its network; set providers.gcp.ssh_ingress_cidrs" \
        in text, result.stdout
    result = CliRunner().invoke(app, ["plan", str(EXAMPLE), "--configured", "--json"], catch_exceptions=False)
    import json

    [plan] = json.loads(result.stdout)
    assert plan["reach"].startswith("reach a node: no port is open")


def test_the_console_job_page_says_how_to_reach_a_live_machine(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from orchestrator.console.app import ConsoleApp
    from orchestrator.console.auth import Guard
    from orchestrator.store.db import open_store
    from tests.support import console_world
    from tests.test_console_http import call

    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    store = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    try:
        console_world.fill(store, now)
        page = call(ConsoleApp(store, Guard(None), clock=lambda: now), "GET", "/jobs/llama-ft").body
    finally:
        store.close()
    # llama-ft runs on GCP with no public address; its preempted AWS attempt is not live: no line for it.
    assert page.count("reach: ") == 1 and "reach: no public address: the Compute Engine console" in page
