"""``orch rehearse MANIFEST``: prove, before paying, that the job checkpoints and resumes after a preemption."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, fail, wrap
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app
from orchestrator.cli.one_job import JobOpt, pick_job
from orchestrator.words import plural


def _local_gpus() -> int:
    """GPUs on this machine per ``nvidia-smi -L`` (0 without it)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


@app.command()
def rehearse(
    manifest: Annotated[Path, typer.Argument(help="The job manifest (one job, or pick one with --job).",
                                             show_default=False)],
    job: JobOpt = None,
    preempt_at: Annotated[int | None, typer.Option("--preempt-at", help="Raise the preemption notice at this step "
                                                   "(default: the first step or checkpoint seen; 0: at once).")]
    = None,
    kill_at: Annotated[int | None, typer.Option("--kill-at", help="Kill the machine hard at this step (default: "
                                                "once a checkpoint after the notice is committed).")] = None,
    procs: Annotated[int | None, typer.Option("--procs", help="Processes per node here (default: local GPUs, "
                                              "or 2 on CPU; at most the manifest's count).")] = None,
    notice_window: Annotated[float, typer.Option("--notice-window", help="Seconds the cloud warns before it "
                                                 "reclaims the machine, when nothing is committed.")] = 120.0,
    timeout: Annotated[float, typer.Option("--timeout", help="Give up any single wait after this many seconds.")]
    = 1800.0,
    compare: Annotated[bool, typer.Option("--compare/--no-compare", help="Also run the job uninterrupted and "
                                          "compare final checkpoints.")] = True,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the rehearsal's directory (logs, stores).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON.")] = False,
) -> None:
    """Run the job here under the real agent, preempt, kill and relaunch it from LATEST: does it resume?

    Exit 0 only if it resumed."""
    from orchestrator.manifest import ManifestError, load_manifests
    from orchestrator.rehearse.runner import RehearsalOptions
    from orchestrator.rehearse.scenario import rehearse as run_rehearsal

    for flag, value, low in (("--preempt-at", preempt_at, 0), ("--kill-at", kill_at, 1), ("--procs", procs, 1)):
        if value is not None and value < low:
            fail(f"{flag} must be {low} or more, got {value}", EXIT_BAD_INPUT)
    if notice_window <= 0 or timeout <= 0:
        fail("--notice-window and --timeout must be positive", EXIT_BAD_INPUT)
    if not sys.platform.startswith("linux"):
        fail("orch rehearse needs Linux (the node agent reads /proc)", EXIT_BAD_INPUT)
    try:
        loaded = load_manifests([manifest])
    except ManifestError as exc:
        for error in exc.errors:
            sys.stderr.write(error.format() + "\n")
        raise SystemExit(EXIT_BAD_INPUT) from None
    chosen = loaded[pick_job(manifest, loaded, job, "rehearse")]
    m = chosen.manifest
    gpus = _local_gpus()
    n = procs or min(m.resources.count, gpus if gpus else 2)
    opts = RehearsalOptions(preempt_at, kill_at, n, plural(gpus, "local GPU") if gpus else "CPU", notice_window,
                            timeout, compare, keep)
    report = run_rehearsal(m, chosen.source, opts, lambda line: sys.stderr.write(wrap(f"rehearse: {line}") + "\n"))
    if as_json:
        sys.stdout.write(dumps(report.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(report.lines()) + "\n")
    raise SystemExit(report.exit_code)
