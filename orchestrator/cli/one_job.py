"""The one job of a manifest file a single-job command acts on (``orch render``, ``orch rehearse``): the file's
only job, or the one ``--job`` names; the same refusals (exit 2) from every such command."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, fail

if TYPE_CHECKING:
    from orchestrator.manifest import LoadedManifest

#: ``--job`` as every single-job command spells it.
JobOpt = Annotated[str | None, typer.Option("--job", help="The job to take when the file holds several.")]

def pick_job(manifest: Path, loaded: Sequence[LoadedManifest], job: str | None, verb: str) -> int:
    """The index in ``loaded`` (the jobs of ``manifest``) of the job to ``verb``: the only one, or the one named
    ``job``. Fails (exit 2) for a file with no job, several and no ``--job``, or a ``--job`` it does not hold
    (with the close name, as git's did-you-mean)."""
    from difflib import get_close_matches

    if not loaded:   # an empty file, or only comments: "holds : pick one with --job" would name nothing to pick
        fail(f"{manifest} holds no job (apiVersion: orch/v1, kind: Job, ...): nothing to {verb}", EXIT_BAD_INPUT)
    names = [m.manifest.name for m in loaded]
    if job is None:
        if len(loaded) == 1:
            return 0
        fail(f"{manifest} holds {', '.join(names)}: pick one with --job", EXIT_BAD_INPUT)
    if job in names:
        return names.index(job)
    meant = get_close_matches(job, names, n=1, cutoff=0.75)
    guess = f"; did you mean {meant[0]!r}?" if meant else ""
    fail(f"no job {job!r} in {manifest}{guess} (it holds {', '.join(names)})", EXIT_BAD_INPUT)
