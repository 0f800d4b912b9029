"""Read manifests from files and directories, reporting every problem at its line and column.

The YAML is built from the parser's events so that each value keeps its position (yamlread, yamldoc); text
values are screened for credentials and control characters (screen); pydantic's error locations are
then mapped back to the key or value at fault (error_positions). A manifest read from a file must also name in
``code.path`` a directory of its repository (code_path). The work is bounded whatever the input: file size,
documents, values, depth, errors reported, and the names the did-you-mean search compares.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from orchestrator.inputs.files import os_error_text
from orchestrator.inputs.yaml12 import YamlInputError
from orchestrator.inputs.yaml_words import yaml_kind
from orchestrator.inputs.yamldoc import Document, Path_, Pos
from orchestrator.inputs.yamlread import MAX_BYTES, parse_yaml, read_regular_file
from orchestrator.manifest.as_written import as_written_errors
from orchestrator.manifest.code_path import code_path_error
from orchestrator.manifest.error_positions import Suggester, error_from_pydantic, field_text, nearest
from orchestrator.manifest.errors import ManifestError, raise_all
from orchestrator.manifest.schema import Manifest
from orchestrator.manifest.screen import Finding, screen

MANIFEST_SUFFIXES = (".yaml", ".yml")
MAX_ERRORS_PER_FILE = 50      # past this, one line says how many more: a broken file is not a flood
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
        pos = (doc.keys.get(finding.path) if finding.on_key else None) or nearest(doc, finding.path)
        placed.append((pos.line, pos.col, finding))
    placed.sort(key=lambda p: (p[0], p[1]))
    return [ManifestError(path, f.message, line=line, col=col, field=field_text(f.path, f.on_key), hint=f.hint)
            for line, col, f in placed[:MAX_ERRORS_PER_FILE + 1]]


def _under(loc: tuple[str | int, ...], paths: set[Path_]) -> bool:
    return any(loc[:n] in paths for n in range(1, len(loc) + 1))


def _validate_document(path: Path, doc: Document) -> Manifest:
    if not isinstance(doc.data, dict):
        raise ManifestError(path, f"a manifest must be a mapping (got {yaml_kind(doc.data)})",
                            line=doc.start.line, col=doc.start.col, hint="start with apiVersion: orch/v1")
    findings = screen(doc.data)
    screened = _screen(path, doc, findings)
    # A screened value is reported once, as what it looks like; what pydantic says of it could repeat it.
    hidden = {f.path for f in findings}
    try:
        manifest = Manifest.model_validate(doc.data)
    except ValidationError as exc:
        suggester = Suggester()
        seen: set[tuple[str, int, int]] = set()
        errors: list[ManifestError] = list(screened)
        for err in exc.errors(include_url=False):
            if _under(tuple(err["loc"]), hidden):
                continue
            me = error_from_pydantic(path, doc, err, suggester)
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
    late = as_written_errors(path, doc, manifest)   # as written only: the store reads jobs without these rules
    if late:
        raise_all(_capped(path, late))
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


def parse_text(text: str, path: Path | str = "<string>", *, check_code: bool = False, code_needs_repo: bool = False
               ) -> list[tuple[Manifest, Pos]]:
    """Validate every document of one YAML text; raise ManifestError (all problems) if any is bad.

    ``check_code``: ``path`` is the manifest's file, and each job's ``code.path`` must be a directory of the
    repository holding it (orchestrator/manifest/code_path.py)."""
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
        missing = code_path_error(path, doc, manifest, needs_repo=code_needs_repo) if check_code else None
        if missing is not None:
            errors.append(missing)
            continue
        out.append((manifest, doc.values.get(("name",), doc.start)))
    raise_all(_capped(path, errors))
    return out


def load_manifests(paths: Iterable[Path | str], *, code_needs_repo: bool = False) -> list[LoadedManifest]:
    """Every job in the files and (recursively) directories given, in path order. ``code_needs_repo``: a
    ``code:`` section in a file outside any git repository is an error at its line (``orch validate``).

    Raises ManifestError, holding every problem found in all files (``.errors``), if anything is
    wrong, including one job name defined twice anywhere in the set.
    """
    files, errors = _manifest_files(paths)
    loaded: list[LoadedManifest] = []
    first_seen: dict[str, tuple[Path, Pos]] = {}
    for path in files:
        try:
            results = parse_text(_read(path), path, check_code=True, code_needs_repo=code_needs_repo)
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
