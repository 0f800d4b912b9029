"""A manifest's ``data:`` and ``checkpoint:`` blocks: the bytes a job reads from buckets (or URLs) and the
bucket its checkpoints are kept in, with how the script is told to resume and to checkpoint now.

URIs are checked for their scheme here (docs/manifests.md); schema.py's ``Manifest`` holds these blocks.
"""

from __future__ import annotations

import signal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.inputs.durations import HintedValueError
from orchestrator.manifest.field_types import DATA_SCHEMES, ENV_NAME_PATTERN, STORE_SCHEMES, Duration
from orchestrator.redaction import shown

__all__ = ["Checkpoint", "DataItem", "Notify", "Resume"]


class _Model(BaseModel):
    # schema.py's _Model, the same config: strict (a YAML string is not silently a number), frozen, no .inf/.nan.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True,
                              use_enum_values=False, allow_inf_nan=False)


def _check_uri(uri: str, schemes: tuple[str, ...]) -> str:
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in schemes or not rest.strip("/"):
        raise HintedValueError(f"{shown(uri)} is not a {' / '.join(s + '://' for s in schemes)} URI",
                               f"e.g. {schemes[0]}://my-bucket/path")
    return uri


class DataItem(_Model):
    """A data set copied to every node before the run starts."""

    source: str = Field(description="s3://, gs://, az:// URI, or an https:// (http://) URL to download.")
    path: str = Field(min_length=1, description="Where it goes on the node (a URL: the file, or the directory "
                                                "it goes into when the path ends with /).")
    size_gb: float | None = Field(None, ge=0, description="Its size, for egress cost and disk checks.")
    region: str | None = Field(None, min_length=1, description="Where the bucket lives (egress is free nearby).")

    @field_validator("source")
    @classmethod
    def _source(cls, uri: str) -> str:
        return _check_uri(uri, DATA_SCHEMES)


class Resume(_Model):
    """How the script is told where to resume from: one command-line argument or one environment variable."""

    arg: str | None = Field(None, min_length=1, description="e.g. --resume-from; its value is the local path.")
    env: str | None = Field(None, pattern=ENV_NAME_PATTERN, description="e.g. RESUME_FROM.")

    @model_validator(mode="after")
    def _one(self) -> Resume:
        if (self.arg is None) == (self.env is None):
            raise HintedValueError("give exactly one of resume.arg or resume.env", "e.g. arg: --resume-from")
        return self


class Notify(_Model):
    """How the script is asked to checkpoint now (before a preemption): a signal or a file that appears."""

    signal: str | None = Field(None, description="e.g. SIGUSR1.")
    file: str | None = Field(None, min_length=1, description="A path the agent creates; the script polls for it.")

    @field_validator("signal")
    @classmethod
    def _signal(cls, name: str | None) -> str | None:
        if name is None:
            return None
        canonical = name.upper() if name.upper().startswith("SIG") else "SIG" + name.upper()
        if canonical not in signal.Signals.__members__ or canonical in ("SIGKILL", "SIGSTOP"):
            raise HintedValueError(f"{shown(name)} is not a signal a process can catch", "e.g. SIGUSR1 or SIGTERM")
        return canonical

    @model_validator(mode="after")
    def _one(self) -> Notify:
        if (self.signal is None) == (self.file is None):
            raise HintedValueError("give exactly one of notify.signal or notify.file", "e.g. signal: SIGUSR1")
        return self


class Checkpoint(_Model):
    """Where the script writes checkpoints and where orch keeps them durably."""

    path: str = Field(min_length=1, description="Local directory the script writes checkpoints into.")
    store: str = Field(description="Durable s3://, gs:// or az:// URI they are uploaded to.")
    every: Duration | None = Field(None, description="How often the script checkpoints (for loss estimates).")
    resume: Resume = Field(default_factory=lambda: Resume(arg="--resume-from"))
    notify: Notify | None = None

    @field_validator("store")
    @classmethod
    def _store(cls, uri: str) -> str:
        return _check_uri(uri, STORE_SCHEMES)
