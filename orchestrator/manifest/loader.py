"""Read manifests from files and directories, reporting every problem at its line and column.

The YAML is composed into nodes first so that each value keeps its position; pydantic's error
locations are then mapped back to the key or value at fault.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.manifest.durations import HintedValueError
from orchestrator.manifest.errors import ManifestError, raise_all
from orchestrator.manifest.schema import Manifest

MANIFEST_SUFFIXES = (".yaml", ".yml")
_MAX_NODES = 100_000      # an alias bomb expands past this: refuse it rather than hang
_MAX_BYTES = 4 * 1024 * 1024


class LoadedManifest(NamedTuple):
    """One valid job: the model, the file it came from, and the hash of its canonical JSON form.

    The hash ignores comments, key order and spelling (aliases), so it changes only when the job does.
    """

    manifest: Manifest
    source: Path
    content_hash: str


@dataclass(frozen=True, slots=True)
class _Pos:
    line: int
    col: int


Path_ = tuple[str | int, ...]


@dataclass
class _Document:
    data: Any
    start: _Pos
    keys: dict[Path_, _Pos]      # where each mapping key is written
    values: dict[Path_, _Pos]    # where each value starts


class _BuildError(Exception):
    def __init__(self, message: str, pos: _Pos, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos
        self.hint = hint


def _pos(mark: yaml.Mark | None) -> _Pos:
    return _Pos(mark.line + 1, mark.column + 1) if mark is not None else _Pos(1, 1)


class _Builder:
    """Turns one composed YAML node into Python data while recording where each piece was written."""

    def __init__(self, loader: yaml.SafeLoader) -> None:
        self.loader = loader
        self.keys: dict[Path_, _Pos] = {}
        self.values: dict[Path_, _Pos] = {}
        self.count = 0
        self.active: set[int] = set()

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.count += 1
        if self.count > _MAX_NODES:
            raise _BuildError("the document is too large (aliases expand too far)", _pos(node.start_mark))
        self.values.setdefault(path, _pos(node.start_mark))
        if isinstance(node, yaml.ScalarNode):
            return self.loader.construct_object(node, deep=True)
        if id(node) in self.active:
            raise _BuildError("a YAML alias refers to itself", _pos(node.start_mark))
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(child, (*path, i)) for i, child in enumerate(node.value)]
            if isinstance(node, yaml.MappingNode):
                self.loader.flatten_mapping(node)   # YAML merge keys (<<: *defaults)
                out: dict[Any, Any] = {}
                for key_node, value_node in node.value:
                    if not isinstance(key_node, yaml.ScalarNode):
                        raise _BuildError("a mapping key must be a plain value", _pos(key_node.start_mark))
                    key = self.loader.construct_object(key_node, deep=True)
                    if not isinstance(key, str | int | float | bool) and key is not None:
                        raise _BuildError("a mapping key must be text", _pos(key_node.start_mark))
                    if key in out:
                        raise _BuildError(f"key {key!r} appears twice in one mapping", _pos(key_node.start_mark),
                                          "remove one")
                    key_path = (*path, key)
                    self.keys[key_path] = _pos(key_node.start_mark)
                    out[key] = self.build(value_node, key_path)
                return out
        finally:
            self.active.discard(id(node))
        raise _BuildError(f"unsupported YAML node {type(node).__name__}", _pos(node.start_mark))


def _line_col(text: str, index: int) -> _Pos:
    before = text[:index]
    return _Pos(before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1)


def _parse_documents(path: Path, text: str) -> list[_Document]:
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:
        pos = _line_col(text, exc.position)
        raise ManifestError(path, f"character #x{exc.character:04x} is not allowed in YAML", line=pos.line,
                            col=pos.col, hint="remove control characters") from None
    docs: list[_Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            builder = _Builder(loader)
            data = builder.build(node, ())
            docs.append(_Document(data, _pos(node.start_mark), builder.keys, builder.values))
    except _BuildError as exc:
        raise ManifestError(path, exc.message, line=exc.pos.line, col=exc.pos.col, hint=exc.hint) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        raise ManifestError(path, f"YAML syntax error: {message}", line=_pos(mark).line, col=_pos(mark).col,
                            hint="check the indentation and quoting") from None
    except yaml.reader.ReaderError as exc:
        pos = _line_col(text, exc.position)
        raise ManifestError(path, f"character #x{exc.character:04x} is not allowed in YAML", line=pos.line,
                            col=pos.col, hint="remove control characters") from None
    except yaml.YAMLError as exc:
        raise ManifestError(path, f"YAML error: {' '.join(str(exc).split())}") from None
    except (ValueError, OverflowError, RecursionError) as exc:
        # PyYAML's constructors can raise plain errors on odd scalars (e.g. out-of-range timestamps).
        raise ManifestError(path, f"unreadable YAML value: {type(exc).__name__}") from None
    finally:
        loader.dispose()
    return docs


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


def _error_from_pydantic(path: Path, doc: _Document, err: Any) -> ManifestError:
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
    field = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in field_parts).replace(".[", "[")
    key = tuple(clean)
    on_key = kind == "extra_forbidden" or (len(loc) > len(clean) and loc[len(clean)] == "[key]")
    pos = (doc.keys.get(key) if on_key else None) or doc.values.get(key) or doc.start
    hint: str | None = None
    message = err["msg"]
    ctx = err.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, HintedValueError):
        message, hint = cause.message, cause.hint
    elif kind == "value_error" and message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if kind == "extra_forbidden":
        unknown = str(loc[-1]) if loc else ""
        known = _field_names(_model_at(clean[:-1]) or Manifest)
        close = difflib.get_close_matches(unknown, known, n=1, cutoff=0.5)
        message = "unknown field"
        hint = f"did you mean {close[0]!r}?" if close else f"known fields here: {', '.join(known)}"
    elif kind == "missing":
        message = "required field is missing"
    elif kind in ("model_type", "dict_type") or kind.endswith("_type"):
        got = type(err.get("input")).__name__
        message = f"{message.rstrip('.')} (got {_yaml_type(got)})"
    elif kind == "literal_error" and field == "apiVersion":
        hint = "write apiVersion: orch/v1"
    elif kind == "literal_error" and field == "kind":
        hint = "write kind: Job"
    elif kind == "string_pattern_mismatch" and field == "name":
        message = "a job name is lower-case letters, digits and '-', starting with a letter, at most 63"
    return ManifestError(path, message.rstrip("."), line=pos.line, col=pos.col, field=field, hint=hint)


def _yaml_type(python_type: str) -> str:
    return {"dict": "a mapping", "list": "a list", "str": "text", "int": "an integer", "float": "a number",
            "bool": "a boolean", "NoneType": "nothing", "datetime": "a date-time", "date": "a date"}.get(
        python_type, python_type)


def _validate_document(path: Path, doc: _Document) -> Manifest:
    if not isinstance(doc.data, dict):
        raise ManifestError(path, f"a manifest must be a mapping (got {_yaml_type(type(doc.data).__name__)})",
                            line=doc.start.line, col=doc.start.col, hint="start with apiVersion: orch/v1")
    try:
        return Manifest.model_validate(doc.data)
    except ValidationError as exc:
        seen: set[tuple[str, int, int]] = set()
        errors: list[ManifestError] = []
        for err in exc.errors(include_url=False):
            me = _error_from_pydantic(path, doc, err)
            marker = (me.field, me.line or 0, me.col or 0)
            if marker in seen:   # one union failing several ways is one problem
                continue
            seen.add(marker)
            errors.append(me)
        errors.sort(key=lambda e: (e.line or 0, e.col or 0))
        raise_all(errors)
        raise AssertionError("unreachable") from None


def content_hash(manifest: Manifest) -> str:
    canonical = json.dumps(manifest.to_json(), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _manifest_files(paths: Iterable[Path | str]) -> tuple[list[Path], list[ManifestError]]:
    files: list[Path] = []
    errors: list[ManifestError] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())
            if not found:
                errors.append(ManifestError(path, "no manifests here", hint="orch reads *.yaml and *.yml files"))
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            errors.append(ManifestError(path, "no such file or directory"))
    unique: list[Path] = []
    seen: set[Path] = set()
    for f in files:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique, errors


def _read(path: Path) -> str:
    try:
        size = path.stat().st_size
        if size > _MAX_BYTES:
            raise ManifestError(path, f"file is too large for a manifest ({size} bytes)")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(path, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ManifestError(path, f"cannot read: {exc.strerror or exc}") from None


def parse_text(text: str, path: Path | str = "<string>") -> list[tuple[Manifest, _Pos]]:
    """Validate every document of one YAML text; raise ManifestError (all problems) if any is bad."""
    path = Path(path)
    out: list[tuple[Manifest, _Pos]] = []
    errors: list[ManifestError] = []
    for doc in _parse_documents(path, text):
        if doc.data is None:
            continue    # an empty document, e.g. after a trailing ---
        try:
            manifest = _validate_document(path, doc)
        except ManifestError as exc:
            errors.extend(exc.errors)
            continue
        out.append((manifest, doc.values.get(("name",), doc.start)))
    raise_all(errors)
    return out


def load_manifests(paths: Iterable[Path | str]) -> list[LoadedManifest]:
    """Every job in the files and (recursively) directories given, in path order.

    Raises ManifestError, holding every problem found in all files (``.errors``), if anything is
    wrong, including one job name defined twice anywhere in the set.
    """
    files, errors = _manifest_files(paths)
    loaded: list[LoadedManifest] = []
    first_seen: dict[str, tuple[Path, _Pos]] = {}
    for path in files:
        try:
            results = parse_text(_read(path), path)
        except ManifestError as exc:
            errors.extend(exc.errors)
            continue
        for manifest, pos in results:
            previous = first_seen.get(manifest.name)
            if previous is not None:
                where = f"{previous[0]}:{previous[1].line}:{previous[1].col}"
                errors.append(ManifestError(path, f"job name {manifest.name!r} is already defined at {where}",
                                            line=pos.line, col=pos.col, field="name",
                                            hint="job names are unique across all manifests applied together"))
                continue
            first_seen[manifest.name] = (path, pos)
            loaded.append(LoadedManifest(manifest, path, content_hash(manifest)))
    raise_all(errors)
    return loaded
