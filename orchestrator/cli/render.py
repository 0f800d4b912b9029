"""``orch render MANIFEST``: print exactly what would run on one node (script, agent config)."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, fail, fail_manifests
from orchestrator.cli.main import app
from orchestrator.cli.one_job import JobOpt, pick_job


class Part(StrEnum):
    all = "all"
    script = "script"
    agent = "agent"


@app.command()
def render(
    manifest: Annotated[Path, typer.Argument(help="Job manifest (YAML, apiVersion orch/v1; one job, or pick one "
                                                  "with --job).")],
    job_name: JobOpt = None,
    node_rank: Annotated[int, typer.Option("--node-rank", help="Which node's script to render.")] = 0,
    master_addr: Annotated[str | None, typer.Option("--master-addr", help="Node 0's address.")] = None,
    part: Annotated[Part, typer.Option("--part", help="all, script (startup.sh) or agent (agent.json).")]
    = Part.all,
) -> None:
    """Print the startup script and agent config a node would get. Secrets appear by name only."""
    from orchestrator.manifest import ManifestError, load_manifests
    from orchestrator.runtime.codepack import CodePackError, pin_loaded
    from orchestrator.runtime.from_manifest import LaunchFacts, render_input_for
    from orchestrator.runtime.objectstore import UnsupportedStoreError
    from orchestrator.runtime.render import AGENT_CONFIG_NAME, STARTUP_SCRIPT_NAME, render_node
    from orchestrator.runtime.render_input import RenderInputError

    try:
        loaded, packs = pin_loaded(load_manifests([manifest]))
    except ManifestError as exc:   # each problem as validate, plan and apply say it: path:line:col: field: ...
        fail_manifests(exc.errors)
    except CodePackError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    index = pick_job(manifest, loaded, job_name, "render")
    job = loaded[index].manifest
    if not 0 <= node_rank < job.resources.nodes:
        fail(f"--node-rank {node_rank} is outside 0..{job.resources.nodes - 1} for job {job.name}", EXIT_BAD_INPUT)
    facts = LaunchFacts(node_rank=node_rank, master_addr=master_addr or "127.0.0.1")
    try:
        node = render_node(render_input_for(job, facts))
    except (RenderInputError, UnsupportedStoreError) as exc:
        fail(f"{manifest}: {exc}", EXIT_BAD_INPUT)
    pack = packs[index]
    code = (f"# ===== code pack =====\n# {pack.summary()}\n# unpacked into the job's working directory before setup\n"
            + "".join(f"# note: {n}\n" for n in pack.notes)) if pack else "# ===== code pack =====\n# none\n"
    if part is Part.script:
        sys.stdout.write(node.script)
    elif part is Part.agent:
        sys.stdout.write(node.agent_config)
    else:
        sys.stdout.write(f"{code}# ===== {STARTUP_SCRIPT_NAME} =====\n{node.script}"
                         f"# ===== {AGENT_CONFIG_NAME} =====\n{node.agent_config}")
