"""A manifest's ``code:`` block: which files of the repository go to every node (docs/manifests.md).

``code:`` left out means the git repository that holds the manifest, whole, at the commit ``orch apply`` sees
(nothing is shipped when the manifest is in no repository). ``path`` narrows it to a sub-tree, ``include``
and ``exclude`` (and a ``.orchignore`` at the sub-tree's root) filter it with shell globs. ``enabled: false``
ships nothing (the image or ``setup`` brings the code).

``pin`` is orch's, not the user's: ``orch apply`` fills it with the commit and the pack it made
(orchestrator/runtime/codepack.py), so the stored job names exactly what every node and every relaunch unpacks.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.inputs.durations import HintedValueError

__all__ = ["DEFAULT_LIMIT_MB", "Code", "CodePin"]

#: The largest pack (gzip'd bytes) orch ships unless ``code.limit_mb`` says otherwise: code, not data.
DEFAULT_LIMIT_MB = 50


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True,
                              allow_inf_nan=False)


class CodePin(_Model):
    """What ``orch apply`` packed: the repository, the commit, and the pack (content-addressed by sha256)."""

    repo: str = Field(description="The repository's top directory on the machine that applied.")
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    path: str = Field(".", description="The sub-tree packed, relative to the repository.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="The pack's sha256 (its name in stores).")
    files: int = Field(ge=0)
    bytes: int = Field(ge=0, description="The pack's size (gzip'd tar).")
    dirty: bool = Field(False, description="Uncommitted changes of tracked files are in the pack (--dirty).")


def _relative(path: str) -> str:
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if path.startswith("/") or ".." in parts:
        raise HintedValueError(f"code.path {path!r} must be a path inside the repository", "e.g. path: train")
    return "/".join(parts) or "."


class Code(_Model):
    """The code shipped to every node, unpacked into the job's working directory before ``setup``."""

    enabled: bool = Field(True, description="false: ship nothing (the image or setup brings the code).")
    path: str = Field(".", min_length=1, description="Sub-tree of the repository to ship (its root becomes "
                      "the job's working directory).")
    include: list[str] = Field(default_factory=list, max_length=256,
                               description="Globs (relative to path): ship only matching files.")
    exclude: list[str] = Field(default_factory=list, max_length=256,
                               description="Globs (relative to path): never ship these (as .orchignore).")
    limit_mb: int = Field(DEFAULT_LIMIT_MB, ge=1, le=2048, description="Refuse a pack larger than this.")
    pin: CodePin | None = Field(None, description="Set by orch apply (the commit and pack); not written by hand.")

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _relative(value)
