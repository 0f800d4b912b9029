"""Rules for manifests as written, which the loader applies and the store does not (a job applied before a rule
still loads and runs as it did): ``as_written_errors``.

- A ``launcher: command`` job resumed by argument runs one command. orch appends the resume argument
  (``checkpoint.resume.arg`` and the checkpoint's path) to ``run.command`` as the shell's ``"$@"``. A list or
  pipeline would pass it to its last command only (``python train.py && python eval.py``: eval.py gets
  ``--resume-from`` and training starts over from step 0 after every preemption), and a comment would swallow it.
- ``env`` and ``secrets`` names do not start with ``ORCH_``: orch sets its own on the node (``ORCH_NODE_RANK``,
  ``ORCH_RESUME_PATH``, ``ORCH_CHECKPOINT_DIR``...), and the job's, exported after them, would override them.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from orchestrator.inputs.yamldoc import Document
from orchestrator.manifest.error_positions import nearest
from orchestrator.manifest.errors import ManifestError
from orchestrator.manifest.schema import Launcher, Manifest

__all__ = ["as_written_errors", "splitting_token"]

#: The shell's list, pipeline and subshell operators (a redirection such as ``2>&1`` is not one).
_SPLITTERS = frozenset({"&&", "||", ";", ";;", "|", "|&", "&", "(", ")"})


def splitting_token(command: str) -> str | None:
    """The first operator or comment in ``command`` after which appended arguments would not reach its first
    command, or None when it is one simple command (or one the shell's own quoting rules cannot read)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        for token in lexer:
            if token in _SPLITTERS:
                return token
            if token.startswith("#"):
                return "#"
    except ValueError:   # unbalanced quotes: the shell refuses the script, reported where it runs
        return None
    return None


def _resume_command_error(path: Path, doc: Document, manifest: Manifest) -> ManifestError | None:
    """The error for a command the resume argument would not reach, at ``run.command``'s line; else None."""
    run, checkpoint = manifest.run, manifest.checkpoint
    if run.launcher is not Launcher.COMMAND or run.command is None or checkpoint is None:
        return None
    if checkpoint.resume.arg is None:
        return None
    token = splitting_token(run.command)
    if token is None:
        return None
    what = "a comment ('#')" if token == "#" else f"a shell list or pipeline ({token!r})"
    pos = nearest(doc, ("run", "command"))
    return ManifestError(
        path, f"{what}: orch appends the resume argument ({checkpoint.resume.arg} PATH) to the command, so it "
              "would reach only the last command, and the job would start over after a preemption",
        line=pos.line, col=pos.col, field="run.command",
        hint="put the commands in a script and run it (command: bash run.sh), or use checkpoint.resume: "
             "{env: RESUME_FROM} and read it in the script")


#: The prefix of the environment names orch sets on the node itself.
ORCH_PREFIX = "ORCH_"


def _orch_name_errors(path: Path, doc: Document, manifest: Manifest) -> list[ManifestError]:
    errors = []
    for name in manifest.env:
        if name.startswith(ORCH_PREFIX):
            pos = nearest(doc, ("env", name))
            errors.append(ManifestError(path, f"{name}: names starting {ORCH_PREFIX} are orch's own on the node "
                                              "(ORCH_NODE_RANK, ORCH_RESUME_PATH, ...); the job's would override them",
                                        line=pos.line, col=pos.col, field="env", hint="rename it"))
    for i, name in enumerate(manifest.secrets):
        if name.startswith(ORCH_PREFIX):
            pos = nearest(doc, ("secrets", i))
            errors.append(ManifestError(path, f"{name}: names starting {ORCH_PREFIX} are orch's own on the node; the "
                                              "job's would override them", line=pos.line, col=pos.col,
                                        field=f"secrets[{i}]", hint="export it under another name"))
    return errors


def as_written_errors(path: Path, doc: Document, manifest: Manifest) -> list[ManifestError]:
    """What the rules above find in one validated manifest, in file order (none: it may be applied)."""
    found = [e for e in [_resume_command_error(path, doc, manifest)] if e is not None]
    found += _orch_name_errors(path, doc, manifest)
    return sorted(found, key=lambda e: (e.line or 0, e.col or 0))
