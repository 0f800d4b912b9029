"""What ``orch apply`` records: manifests loaded and pinned to a commit, then written as the desired state.

The other operations live beside it: plan.py (``orch plan``), launching.py (``orch apply --launch``, the
one-shot engine), status.py (``orch status / events / logs``), down.py (``orch down``). The CLI parses flags,
calls one function, and prints the value it gets back; launching and tearing down go through the engine's
Reconciler on the SQL store, exactly as the daemon would, so a command never knows a cloud's details.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.app.errors import BadInputError
from orchestrator.clock import utcnow
from orchestrator.engine.events import EventKind

if TYPE_CHECKING:
    from orchestrator.manifest import LoadedManifest
    from orchestrator.runtime.codepack import Pack
    from orchestrator.store import Store
    from orchestrator.store.repo import ApplyResult


def load(paths: Sequence[Path], *, allow_dirty: bool = False) -> list[LoadedManifest]:
    """Load and validate manifests, and pin each one's code to the commit seen now (``code.pin``,
    orchestrator/runtime/codepack.py). Raises orchestrator.manifest.ManifestError with every problem, or
    BadInputError when the code cannot be packed (no repository, over the size limit)."""
    return load_with_packs(paths, allow_dirty=allow_dirty)[0]


def load_with_packs(paths: Sequence[Path], *, allow_dirty: bool = False
                    ) -> tuple[list[LoadedManifest], list[Pack | None]]:
    """:func:`load`, with each manifest's code pack (None where nothing is shipped) for display."""
    from orchestrator.manifest import load_manifests
    from orchestrator.runtime.codepack import CodePackError, pin_loaded

    try:
        return pin_loaded(load_manifests(list(paths)), allow_dirty=allow_dirty)
    except CodePackError as exc:
        raise BadInputError(str(exc)) from None


def apply(store: Store, loaded: Sequence[LoadedManifest], *, prune: bool = False,
          now: datetime | None = None) -> ApplyResult:
    """Record the manifests as the desired state in ONE transaction: all of it, or (on error) nothing."""
    from orchestrator.store import repo

    specs = [repo.AppliedJob.from_loaded(*m) for m in loaded]
    now = now or utcnow()
    try:
        with store.transaction() as tx:
            result = repo.apply_jobs(tx, specs, prune=prune, now=now)
            repo.record_event(tx, EventKind.APPLY, f"{len(result.created)} created, {len(result.updated)} updated, "
                              f"{len(result.unchanged)} unchanged, {len(result.pruned)} pruned",
                              data={"created": list(result.created), "updated": list(result.updated),
                                    "pruned": list(result.pruned)}, ts=now)
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    return result
