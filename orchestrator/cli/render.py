"""``orch render MANIFEST``: print exactly what would run on one node (script, agent config)."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, fail
from orchestrator.cli.main import app


class Part(StrEnum):
    all = "all"
    script = "script"
    agent = "agent"


@app.command()
def render(
    manifest: Annotated[Path, typer.Argument(help="Job manifest (YAML; shape in docs/runtime.md).")],
    node_rank: Annotated[int, typer.Option("--node-rank", help="Which node's script to render.")] = 0,
    master_addr: Annotated[str | None, typer.Option("--master-addr", help="Node 0's address.")] = None,
    part: Annotated[Part, typer.Option("--part", help="all, script (startup.sh) or agent (agent.json).")]
    = Part.all,
) -> None:
    """Print the startup script and agent config a node would get. Secrets appear by name only."""
    import yaml

    from orchestrator.runtime.objectstore import UnsupportedStoreError
    from orchestrator.runtime.render import AGENT_CONFIG_NAME, STARTUP_SCRIPT_NAME, render_node
    from orchestrator.runtime.render_input import RenderInputError, render_input_from_manifest

    try:
        doc = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"cannot read {manifest}: {exc.strerror}", EXIT_BAD_INPUT)
    except yaml.YAMLError as exc:
        fail(f"{manifest} is not valid YAML: {exc}", EXIT_BAD_INPUT)
    try:
        node = render_node(render_input_from_manifest(doc, node_rank=node_rank, master_addr=master_addr))
    except (RenderInputError, UnsupportedStoreError) as exc:
        fail(f"{manifest}: {exc}", EXIT_BAD_INPUT)
    if part is Part.script:
        sys.stdout.write(node.script)
    elif part is Part.agent:
        sys.stdout.write(node.agent_config)
    else:
        sys.stdout.write(f"# ===== {STARTUP_SCRIPT_NAME} =====\n{node.script}"
                         f"# ===== {AGENT_CONFIG_NAME} =====\n{node.agent_config}")
