"""Read manifests from files and directories, reporting every problem at its line and column.

The YAML is built from the parser's events so that each value keeps its position (yamlread); text
values are screened for credentials and control characters (screen); pydantic's error locations are
then mapped back to the key or value at fault. The work is bounded whatever the input: file size,
documents, values, depth, errors reported, and the names the did-you-mean search compares.
"""

from __future__ import annotations

import hashlib
import json
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError

from orchestrator.inputs.durations import HintedValueError
from orchestrator.inputs.files import os_error_text
from orchestrator.inputs.yaml12 import YamlInputError
from orchestrator.inputs.yamlread import MAX_BYTES, Document, Path_, Pos, parse_yaml, read_regular_file
from orchestrator.manifest.errors import ManifestError, raise_all
from orchestrator.manifest.schema import Manifest
from orchestrator.manifest.screen import Finding, screen
from orchestrator.redaction import shown

MANIFEST_SUFFIXES = (".yaml", ".yml")
MAX_ERRORS_PER_FILE = 50      # past this, one line says how many more: a broken file is not a flood
_MAX_SUGGESTED = 20           # unknown names per document that get a did-you-mean
_MAX_SUGGEST_LEN = 64         # longer names are not compared with anything
MAX_WALK = 20_000             # files and directories a directory argument may hold


class LoadedManifest(NamedTuple):
    """One valid job: the model, the file it came from, and the hash of its canonical JSON form.

    The hash ignores comments, key order and spelling (aliases), so it changes only when the job does.
    """

    manifest: Manifest
    source: Path
    content_hash: str


def _parse_documents(path: Path, text: str) -> list[Document]:
    try:
        return parse_yaml(text)
    except YamlInputError as exc:
        raise ManifestError(path, exc.message, line=exc.line, col=exc.col, hint=exc.hint) from None


def _screen(path: Path, doc: Document, findings: list[Finding]) -> list[ManifestError]:
    """Credentials and control characters in the document's text, each at its key or value: the first
    MAX_ERRORS_PER_FILE + 1 in document order (a file full of them is not a flood)."""
    placed = []
    for finding in findings:
        pos = (doc.keys.get(finding.path) if finding.on_key else None) or _nearest(doc, finding.path)
        placed.append((pos.line, pos.col, finding))
    placed.sort(key=lambda p: (p[0], p[1]))
    return [ManifestError(path, f.message, line=line, col=col, field=_field_text(f.path, f.on_key), hint=f.hint)
            for line, col, f in placed[:MAX_ERRORS_PER_FILE + 1]]


def _under(loc: tuple[str | int, ...], paths: set[Path_]) -> bool:
    return any(loc[:n] in paths for n in range(1, len(loc) + 1))


def _nearest(doc: Document, path: Path_) -> Pos:
    """Where the value at ``path`` is written, or its nearest written ancestor (values under an alias)."""
    for n in range(len(path), -1, -1):
        pos = doc.values.get(path[:n])
        if pos is not None:
            return pos
    return doc.start


def _field_text(path: Path_, on_key: bool = False) -> str:
    parts = path[:-1] if on_key and path and not _printable_key(path[-1]) else path
    text = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in parts).replace(".[", "[")
    return text if text else "(document)"


def _printable_key(key: object) -> bool:
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


class _Suggester:
    """Did-you-mean for unknown field names, within a budget: a hostile file with 20,000 unknown names
    (or one name of a megabyte) costs no more than a typo."""

    def __init__(self) -> None:
        self.left = _MAX_SUGGESTED

    def hint(self, unknown: str, known: list[str]) -> str:
        if self.left > 0 and len(unknown) <= _MAX_SUGGEST_LEN:
            self.left -= 1
            import difflib

            close = difflib.get_close_matches(unknown, known, n=1, cutoff=0.5)
            if close:
                return f"did you mean {close[0]!r}?"
        return f"known fields here: {', '.join(known)}"


def _error_from_pydantic(path: Path, doc: Document, err: Any, suggester: _Suggester) -> ManifestError:
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
    key = tuple(clean)
    on_key = kind == "extra_forbidden" or (len(loc) > len(clean) and loc[len(clean)] == "[key]")
    field = _field_text(tuple(field_parts), on_key)
    pos = (doc.keys.get(key) if on_key else None) or _nearest(doc, key)
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
        message = "unknown field" if _printable_key(unknown) else f"unknown field {shown(unknown, 40)}"
        hint = suggester.hint(unknown, _field_names(_model_at(clean[:-1]) or Manifest))
    elif kind == "missing":
        message = "required field is missing"
    elif kind in ("model_type", "dict_type") or kind.endswith("_type"):
        got = type(err.get("input")).__name__
        message = f"{message.rstrip('.')} (got {_yaml_type(got)})"
    elif kind == "finite_number":
        message, hint = "must be a finite number", "write a number such as 24 (not .inf or .nan)"
    elif kind == "literal_error" and field == "apiVersion":
        hint = "write apiVersion: orch/v1"
    elif kind == "literal_error" and field == "kind":
        hint = "write kind: Job"
    elif kind == "string_pattern_mismatch" and field == "name":
        message = "a job name is lower-case letters, digits and '-', starting with a letter, at most 63"
    return ManifestError(path, message.rstrip("."), line=pos.line, col=pos.col, field=field, hint=hint)


def _yaml_type(python_type: str) -> str:
    return {"dict": "a mapping", "list": "a list", "str": "text", "int": "an integer", "float": "a number",
            "YamlInt": "an integer", "YamlFloat": "a number", "bool": "a boolean", "NoneType": "nothing",
            "datetime": "a date-time", "date": "a date"}.get(python_type, python_type)


def _validate_document(path: Path, doc: Document) -> Manifest:
    if not isinstance(doc.data, dict):
        raise ManifestError(path, f"a manifest must be a mapping (got {_yaml_type(type(doc.data).__name__)})",
                            line=doc.start.line, col=doc.start.col, hint="start with apiVersion: orch/v1")
    findings = screen(doc.data)
    screened = _screen(path, doc, findings)
    # A screened value is reported once, as what it looks like; what pydantic says of it could repeat it.
    hidden = {f.path for f in findings}
    try:
        manifest = Manifest.model_validate(doc.data)
    except ValidationError as exc:
        suggester = _Suggester()
        seen: set[tuple[str, int, int]] = set()
        errors: list[ManifestError] = list(screened)
        for err in exc.errors(include_url=False):
            if _under(tuple(err["loc"]), hidden):
                continue
            me = _error_from_pydantic(path, doc, err, suggester)
            marker = (me.field, me.line or 0, me.col or 0)
            if marker in seen:   # one union failing several ways is one problem
                continue
            seen.add(marker)
            errors.append(me)
            if len(errors) > MAX_ERRORS_PER_FILE:
                break
        errors.sort(key=lambda e: (e.line or 0, e.col or 0))
        raise_all(_capped(path, errors))
        raise AssertionError("unreachable") from None
    if screened:
        raise_all(_capped(path, screened))
    return manifest


def content_hash(manifest: Manifest) -> str:
    canonical = json.dumps(manifest.to_json(), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _manifest_files(paths: Iterable[Path | str]) -> tuple[list[Path], list[ManifestError]]:
    files: list[Path] = []
    errors: list[ManifestError] = []
    for raw in paths:
        path = Path(raw)
        try:
            if path.is_dir():
                found = _walk(path)
                if not found:
                    errors.append(ManifestError(path, "no manifests here", hint="orch reads *.yaml and *.yml files"))
                files.extend(found)
            elif path.exists():
                files.append(path)
            else:
                errors.append(ManifestError(path, "no such file or directory"))
        except OSError as exc:   # a name too long, a directory that cannot be listed
            errors.append(ManifestError(path, os_error_text(exc)))
        except ManifestError as exc:
            errors.append(exc)
    unique: list[Path] = []
    seen: set[Path] = set()
    for f in files:
        try:
            key = f.resolve()
        except (OSError, RuntimeError):   # a symlink loop: reading it reports the error
            key = f
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique, errors


def _walk(root: Path) -> list[Path]:
    """The manifest files under ``root``, sorted; ManifestError past MAX_WALK entries (``orch validate /``
    must not walk the whole disk). Unreadable subdirectories are skipped."""
    import os

    found: list[Path] = []
    seen = 0
    for directory, dirs, names in os.walk(root):
        seen += len(dirs) + len(names)
        if seen > MAX_WALK:
            raise ManifestError(root, f"more than {MAX_WALK} entries under this directory",
                                hint="name the directory that holds the manifests")
        dirs.sort()
        found.extend(Path(directory) / n for n in names if Path(n).suffix in MANIFEST_SUFFIXES)
    return sorted(p for p in found if p.is_file())


def _read(path: Path) -> str:
    try:
        return read_regular_file(path, MAX_BYTES)
    except YamlInputError as exc:
        raise ManifestError(path, exc.message, line=exc.line, col=exc.col, hint=exc.hint) from None


def _capped(path: Path, errors: list[ManifestError]) -> list[ManifestError]:
    if len(errors) <= MAX_ERRORS_PER_FILE:
        return errors
    return [*errors[:MAX_ERRORS_PER_FILE],
            ManifestError(path, f"more problems in this file than the {MAX_ERRORS_PER_FILE} shown",
                          hint="fix these first")]


def parse_text(text: str, path: Path | str = "<string>") -> list[tuple[Manifest, Pos]]:
    """Validate every document of one YAML text; raise ManifestError (all problems) if any is bad."""
    path = Path(path)
    out: list[tuple[Manifest, Pos]] = []
    errors: list[ManifestError] = []
    for doc in _parse_documents(path, text):
        if doc.data is None:
            continue    # an empty document, e.g. after a trailing ---
        if len(errors) > MAX_ERRORS_PER_FILE:
            break
        try:
            manifest = _validate_document(path, doc)
        except ManifestError as exc:
            errors.extend(exc.errors)
            continue
        out.append((manifest, doc.values.get(("name",), doc.start)))
    raise_all(_capped(path, errors))
    return out


def load_manifests(paths: Iterable[Path | str]) -> list[LoadedManifest]:
    """Every job in the files and (recursively) directories given, in path order.

    Raises ManifestError, holding every problem found in all files (``.errors``), if anything is
    wrong, including one job name defined twice anywhere in the set.
    """
    files, errors = _manifest_files(paths)
    loaded: list[LoadedManifest] = []
    first_seen: dict[str, tuple[Path, Pos]] = {}
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
