"""Where a manifest's ``code.path`` is: the sub-tree of the git repository that holds the manifest.

One resolution for everyone: the loader checks here that the directory exists (so ``orch validate``,
``plan`` and ``apply`` report a missing one at its line), and the code pack (orchestrator/runtime/codepack.py)
packs the same directory: ``code.path`` is relative to the top of the repository holding the manifest's
folder, never to the manifest's folder or the current directory.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from orchestrator.inputs.yamldoc import Document
from orchestrator.manifest.error_positions import nearest
from orchestrator.manifest.errors import ManifestError
from orchestrator.manifest.schema import Manifest

__all__ = ["code_path_error", "find_repo"]

#: Directories compared for a did-you-mean: a folder of 100,000 entries is listed no further than this.
MAX_SUGGEST_DIRS = 1000


def find_repo(directory: Path) -> Path | None:
    """The top of the git work tree holding ``directory``, or None."""
    try:
        done = subprocess.run(["git", "-C", str(directory), "rev-parse", "--show-toplevel"], capture_output=True,
                              text=True, timeout=60, check=False)
    except OSError:   # no git on this machine: no repository to resolve against
        return None
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def _close_dir(missing: Path) -> str | None:
    """A directory beside ``missing`` whose name is close to its name, or None."""
    import difflib
    from itertools import islice

    try:
        names = [p.name for p in islice(missing.parent.iterdir(), MAX_SUGGEST_DIRS) if p.is_dir()]
    except OSError:
        return None
    close = difflib.get_close_matches(missing.name, [n for n in names if n != ".git"], n=1, cutoff=0.6)
    return close[0] if close else None


def code_path_error(path: Path, doc: Document, manifest: Manifest, *, needs_repo: bool = False
                    ) -> ManifestError | None:
    """The error for a ``code.path`` that names no directory of the repository holding ``path``; None when
    it does, when no code is shipped, or when the manifest is in no repository (packing says so). With
    ``needs_repo`` (``orch validate``, which packs nothing), a ``code:`` section outside any repository is the
    error packing would raise, at its line: validate said "ok" of a file that plan and apply refuse."""
    code = manifest.code
    if code is None or not code.enabled:
        return None
    if code.path == "." and not needs_repo:
        return None
    repo = find_repo(path.resolve().parent)
    if repo is None:
        if not needs_repo:
            return None
        pos = nearest(doc, ("code",))
        return ManifestError(path, "the manifest is in no git repository, so code: has nothing to ship",
                             line=pos.line, col=pos.col, field="code",
                             hint="git init and commit, or code: {enabled: false}")
    if code.path == ".":
        return None
    target = repo / code.path
    if target.is_dir():
        return None
    pos = nearest(doc, ("code", "path"))
    if target.exists():
        what, hint = "is not a directory", "code.path names the folder whose files are shipped"
    else:
        what = "no such directory"
        close = _close_dir(target)
        suggestion = str(Path(code.path).parent / close) if close else None
        hint = (f"did you mean {suggestion!r}? " if suggestion else "") + \
            f"the path is relative to the repository's top, {repo}"
    return ManifestError(path, f"{code.path!r}: {what} in the repository", line=pos.line, col=pos.col,
                         field="code.path", hint=hint)
