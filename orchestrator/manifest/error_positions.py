"""Where in a manifest's YAML a problem is, and how to say it: pydantic's error locations mapped back to
the key or value at fault, with a did-you-mean for unknown fields (within a budget, whatever the input).
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator.inputs.durations import HintedValueError
from orchestrator.inputs.yaml_words import yaml_type
from orchestrator.inputs.yamldoc import Document, Path_, Pos
from orchestrator.manifest.errors import ManifestError
from orchestrator.manifest.schema import Manifest
from orchestrator.redaction import shown

MAX_SUGGESTED = 20           # unknown names per document that get a did-you-mean
MAX_SUGGEST_LEN = 64         # longer names are not compared with anything


def nearest(doc: Document, path: Path_) -> Pos:
    """Where the value at ``path`` is written, or its nearest written ancestor (values under an alias)."""
    for n in range(len(path), -1, -1):
        pos = doc.values.get(path[:n])
        if pos is not None:
            return pos
    return doc.start


def field_text(path: Path_, on_key: bool = False) -> str:
    parts = path[:-1] if on_key and path and not printable_key(path[-1]) else path
    text = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in parts).replace(".[", "[")
    return text if text else "(document)"


def printable_key(key: object) -> bool:
    from orchestrator.redaction import find_secret

    return isinstance(key, str) and len(key) <= 64 and find_secret(key) is None and key.isprintable()


# -- mapping pydantic errors back to positions ------------------------------------------------------

def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as ``Resources | None`` or ``list[DataItem]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _model_at(loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The model class whose fields are valid at ``loc`` (a path of keys and list indexes)."""
    model: type[BaseModel] | None = Manifest
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        model = _model_in(field.annotation)
    return model


class Suggester:
    """Did-you-mean for unknown field names, within a budget: a hostile file with 20,000 unknown names
    (or one name of a megabyte) costs no more than a typo."""

    def __init__(self) -> None:
        self.left = MAX_SUGGESTED

    def hint(self, unknown: str, known: list[str]) -> str:
        if self.left > 0 and len(unknown) <= MAX_SUGGEST_LEN:
            self.left -= 1
            import difflib

            close = difflib.get_close_matches(unknown, known, n=1, cutoff=0.5)
            if close:
                return f"did you mean {close[0]!r}?"
        return f"known fields here: {', '.join(known)}"


def error_from_pydantic(path: Path, doc: Document, err: Any, suggester: Suggester) -> ManifestError:
    loc = tuple(err["loc"])
    kind = err["type"]
    # Keep only the parts of loc that are really in the document (pydantic adds union-member tags).
    clean: list[str | int] = []
    for part in loc:
        if (*clean, part) in doc.values:
            clean.append(part)
    field_parts: list[str | int] = list(clean)
    if kind == "missing" and loc and isinstance(loc[-1], str) and loc[-1] not in clean:
        field_parts.append(loc[-1])
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, HintedValueError) and cause.at:
        # A check of several fields, about one: at it where it is written, else at its nearest written parent.
        written = [n for n in range(len(cause.at), 0, -1) if (*clean, *cause.at[:n]) in doc.values]
        if written:
            clean.extend(cause.at[: written[0]])
            field_parts = list(clean)
    key = tuple(clean)
    on_key = kind == "extra_forbidden" or (len(loc) > len(clean) and loc[len(clean)] == "[key]")
    field = field_text(tuple(field_parts), on_key)
    pos = (doc.keys.get(key) if on_key else None) or nearest(doc, key)
    hint: str | None = None
    message = err["msg"]
    if isinstance(cause, HintedValueError):
        message, hint = cause.message, cause.hint
    elif kind == "value_error" and message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if kind == "extra_forbidden":
        unknown = str(loc[-1]) if loc else ""
        message = "unknown field" if printable_key(unknown) else f"unknown field {shown(unknown, 40)}"
        hint = suggester.hint(unknown, _field_names(_model_at(clean[:-1]) or Manifest))
    elif kind == "missing":
        message = "required field is missing"
    elif kind == "model_type" and (model := _model_at(clean)) is not None:
        # Not "a valid dictionary or instance of RegionFilter": the class is orch's, the fields are the user's
        # (``regions: us-east-1`` wants ``regions: {allow: [us-east-1]}``).
        message = f"must be a mapping (got {yaml_type(type(err.get('input')).__name__)})"
        hint = f"its fields: {', '.join(_field_names(model))}"
    elif kind in ("model_type", "dict_type") or kind.endswith("_type"):
        got = type(err.get("input")).__name__
        message = f"{message.rstrip('.')} (got {yaml_type(got)})"
    elif kind == "finite_number":
        message, hint = "must be a finite number", "write a number such as 24 (not .inf or .nan)"
    elif kind == "literal_error" and field == "apiVersion":
        hint = "write apiVersion: orch/v1"
    elif kind == "literal_error" and field == "kind":
        hint = "write kind: Job"
    elif kind == "string_pattern_mismatch" and field in ("name", "project"):
        # Not pydantic's regular expression; no name made from the value either (it may be a pasted secret).
        message = (f"a {'job' if field == 'name' else 'project'} name is lower-case letters, digits and '-', "
                   "starting with a letter and ending in a letter or digit, at most 63 characters")
        hint = f"e.g. {field}: {'llama-finetune' if field == 'name' else 'team-a'}"
    return ManifestError(path, message.rstrip("."), line=pos.line, col=pos.col, field=field, hint=hint)
