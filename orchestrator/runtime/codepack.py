"""The code pack: the repository's tracked files at the applied commit, the same bytes for every node.

Hop by hop (docs/runtime.md, "Code from the repository"):

1. ``orch apply`` (and ``plan``/``render``) calls :func:`pin_loaded`: for each manifest whose ``code:`` is
   enabled (left out: the repository holding the manifest), it finds the repository, takes ``HEAD``'s commit,
   lists that commit's tracked files (``git ls-tree``; never the working tree unless ``allow_dirty``) under
   ``code.path``, filters them with ``include``/``exclude``/``.orchignore``, and packs them as a deterministic
   gzip'd tar (sorted, mtime 0, owner 0): equal commit and filters, equal bytes, so the pack is named by its
   sha256. A pack over ``code.limit_mb`` is an error here, before anything launches.
2. The pin (repository, commit, sha256, files, bytes) is written into the job's stored manifest; the pack
   goes to a local content-addressed cache (``$ORCH_CODE_CACHE``, default ``~/.cache/orch/code``).
   A relaunch reads the pin from the store, so it unpacks the applied commit even when the repository moved
   on; applying the manifest again re-pins.
3. :func:`pack_bytes` gives a launch the pack: from the cache, else rebuilt from the repository at the
   pinned commit; either way checked against the pinned sha256.
4. The node: the SSH bootstrapper copies it into the job's work dir as ``code-<sha256>.tar.gz``; the agent
   checks its sha256 and unpacks it there before it starts ``startup.sh`` (which runs ``setup``).
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.manifest.code_path import find_repo
from orchestrator.manifest.code_spec import Code, CodePin
from orchestrator.manifest.loader import LoadedManifest, content_hash
from orchestrator.manifest.schema import Manifest
from orchestrator.words import plural

__all__ = ["CodePackError", "Pack", "cache_dir", "pack_bytes", "pack_file_name", "pin_loaded", "pin_manifest"]

IGNORE_FILE = ".orchignore"
#: git's mode of a submodule (a commit of another repository): listed, never packed.
SUBMODULE = "160000"
#: How a Git LFS pointer file begins: the commit holds this text, not the file's content.
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\n"


class CodePackError(ValueError):
    """The code cannot be packed or shipped; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Pack:
    """One packed tree: the pin the store keeps, the bytes, and notes for the user (uncommitted changes)."""

    pin: CodePin
    data: bytes
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        dirty = " + uncommitted changes" if self.pin.dirty else ""
        return (f"commit {self.pin.commit[:12]}{dirty}, path {self.pin.path}: {self.pin.files} files, "
                f"{self.pin.bytes} bytes (sha256 {self.pin.sha256[:12]}) from {self.pin.repo}")


@dataclass(frozen=True, slots=True)
class _Entry:
    path: str          # relative to the packed sub-tree
    mode: str          # git's: 100644, 100755, 120000
    data: bytes


def pack_file_name(pin: CodePin) -> str:
    return f"code-{pin.sha256}.tar.gz"


def cache_dir() -> Path:
    """``$ORCH_CODE_CACHE``, else ``$XDG_CACHE_HOME/orch/code``, else ``~/.cache/orch/code``."""
    if os.environ.get("ORCH_CODE_CACHE"):
        return Path(os.environ["ORCH_CODE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orch" / "code"


def _git(repo: Path, *args: str, data: bytes | None = None) -> bytes:
    done = subprocess.run(["git", "-C", str(repo), "-c", "core.quotepath=off", *args], input=data,
                          capture_output=True, timeout=300, check=False)
    if done.returncode != 0:
        raise CodePackError(f"git {' '.join(args[:2])} in {repo}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def _matches(rel: str, pattern: str) -> bool:
    """Shell glob on the path, on its name (a pattern without '/'), or on any directory above it."""
    pat = pattern.strip().rstrip("/")
    if not pat:
        return False
    parts = rel.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    if "/" not in pat:
        candidates += parts
    return any(fnmatch.fnmatchcase(c, pat.lstrip("/")) for c in candidates)


def _blobs(repo: Path, shas: Sequence[str]) -> list[bytes]:
    out = _git(repo, "cat-file", "--batch", data="".join(f"{s}\n" for s in shas).encode())
    blobs, at = [], 0
    for _ in shas:
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        blobs.append(out[header_end + 1: header_end + 1 + size])
        at = header_end + 1 + size + 1
    return blobs


def _tracked(repo: Path, commit: str, sub: str, dirty: bool) -> list[_Entry]:
    """The commit's files under ``sub``; ``dirty``: the index's instead (a file added but not committed is
    tracked too), with the working tree's content."""
    where = [] if sub == "." else ["--", sub]
    if dirty:
        listing = _git(repo, "ls-files", "-s", "-z", *where)
    else:
        listing = _git(repo, "ls-tree", "-r", "-z", "--full-tree", commit, *where)
    rows = []
    prefix = "" if sub == "." else sub + "/"
    entries = []
    for record in filter(None, listing.split(b"\0")):
        meta, _, name = record.decode().partition("\t")
        mode, kind_or_sha, sha_or_stage = meta.split()
        if mode == SUBMODULE:
            # Not shipped (another repository): an entry without content, for the note (_unshipped), never packed.
            entries.append(_Entry(name.removeprefix(prefix), mode, b""))
        elif not dirty and kind_or_sha == "blob":
            rows.append((name, mode, sha_or_stage))
        elif dirty and sha_or_stage in ("0", "2"):    # a conflict: "ours" only
            rows.append((name, mode, kind_or_sha))
    datas = _blobs(repo, [sha for _, _, sha in rows]) if rows and not dirty else [b""] * len(rows)
    for (name, mode, _), data in zip(rows, datas, strict=True):
        if dirty:
            on_disk = repo / name
            if not on_disk.is_symlink() and not on_disk.exists():
                continue             # deleted in the working tree
            data = os.readlink(on_disk).encode() if on_disk.is_symlink() else on_disk.read_bytes()
        entries.append(_Entry(name.removeprefix(prefix), mode, data))
    return entries


def _filter(entries: list[_Entry], code: Code) -> list[_Entry]:
    ignore = next((e.data.decode(errors="replace") for e in entries if e.path == IGNORE_FILE), "")
    excluded = [*code.exclude, *(ln for ln in ignore.splitlines() if ln.strip() and not ln.startswith("#"))]
    kept = [e for e in entries if not any(_matches(e.path, p) for p in excluded)]
    if code.include:
        kept = [e for e in kept if any(_matches(e.path, p) for p in code.include)]
    return sorted(kept, key=lambda e: e.path)


def _tar(entries: list[_Entry]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in (e for e in entries if e.mode != SUBMODULE):
            info = tarfile.TarInfo(e.path)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if e.mode == "120000":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, e.data.decode(), 0o777
                tar.addfile(info)
            else:
                info.size, info.mode = len(e.data), 0o755 if e.mode == "100755" else 0o644
                tar.addfile(info, io.BytesIO(e.data))
    return gzip.compress(raw.getvalue(), compresslevel=6, mtime=0)


def _uncommitted(repo: Path, sub: str) -> tuple[list[str], list[str]]:
    """(tracked files changed since HEAD, untracked files) under ``sub``: neither is shipped by default."""
    out = _git(repo, "status", "--porcelain", "-z", "--untracked-files=all", "--", sub)
    records = out.decode().split("\0")
    changed: list[str] = []
    untracked: list[str] = []
    at = 0
    while at < len(records):
        r = records[at]
        at += 1
        if len(r) <= 3:
            continue
        (untracked if r.startswith("??") else changed).append(r[3:])
        if "R" in r[:2] or "C" in r[:2]:
            at += 1                  # a rename's or copy's next record is its old name, not a change of its own
    return changed, untracked


def build(repo: Path, code: Code, *, allow_dirty: bool = False, job: str = "") -> Pack:
    """Pack ``code`` from ``repo`` at HEAD (see the module docstring); raises CodePackError."""
    commit = _git(repo, "rev-parse", "--verify", "HEAD^{commit}").decode().strip()
    if code.path != "." and not _git(repo, "ls-tree", "--full-tree", commit, "--", code.path).strip():
        raise CodePackError(f"code.path {code.path!r} is not in commit {commit[:12]} of {repo}")
    changed, untracked = _uncommitted(repo, code.path)
    dirty = allow_dirty and bool(changed)
    kept = _filter(_tracked(repo, commit, code.path, dirty), code)
    entries = [e for e in kept if e.mode != SUBMODULE]
    data = _tar(entries)
    limit = code.limit_mb * 1024 * 1024
    if len(data) > limit:
        biggest = sorted(entries, key=lambda e: len(e.data), reverse=True)[:5]
        raise CodePackError(
            f"job {job}: the code pack is {len(data) / 2**20:.1f} MiB ({len(entries)} files of {repo} at "
            f"{commit[:12]}, path {code.path}), over code.limit_mb {code.limit_mb}; largest: "
            + ", ".join(f"{e.path} ({len(e.data) / 2**20:.1f} MiB)" for e in biggest)
            + ". Narrow code.path, exclude data and outputs (code.exclude or .orchignore), or raise code.limit_mb;"
            " large data belongs in data:")
    notes: tuple[str, ...] = ()
    if dirty:
        notes = (f"job {job}: shipping UNCOMMITTED changes of {plural(len(changed), 'tracked file')}: "
                 + ", ".join(changed[:5]),)
    elif changed:
        notes = (f"job {job}: uncommitted changes of {plural(len(changed), 'tracked file')} are NOT shipped "
                 f"(commit them, or apply with --dirty): " + ", ".join(changed[:5]),)
    if untracked:
        notes += (f"job {job}: not shipped, {plural(len(untracked), 'untracked file')} (git add and commit them): "
                  + ", ".join(untracked[:5]),)
    notes += _unshipped(job, kept)
    pin = CodePin(repo=str(repo), commit=commit, path=code.path, sha256=hashlib.sha256(data).hexdigest(),
                  files=len(entries), bytes=len(data), dirty=dirty)
    return Pack(pin, data, notes)


def _unshipped(job: str, kept: list[_Entry]) -> tuple[str, ...]:
    """Notes on what the commit holds but the pack cannot carry: submodules (other repositories) and Git LFS
    pointers (the commit holds a pointer, the content is on an LFS server): the job would find a missing
    directory or a pointer where it expects its files."""
    subs = [e.path for e in kept if e.mode == SUBMODULE]
    lfs = [e.path for e in kept if e.mode != SUBMODULE and e.data.startswith(LFS_POINTER) and len(e.data) < 1024]
    notes: tuple[str, ...] = ()
    if subs:
        notes += (f"job {job}: not shipped, {plural(len(subs), 'submodule')} (another repository; fetch it in "
                  "setup, or bring it in the image): " + ", ".join(subs[:5]),)
    if lfs:
        notes += (f"job {job}: {plural(len(lfs), 'Git LFS file')} shipped as LFS pointers, not their content "
                  "(stage large files with data:, or run git lfs pull in setup): " + ", ".join(lfs[:5]),)
    return notes


def _save(pack: Pack) -> None:
    where = cache_dir()
    where.mkdir(parents=True, exist_ok=True)
    dest = where / pack_file_name(pack.pin)
    if not dest.exists():
        tmp = dest.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_bytes(pack.data)
        os.replace(tmp, dest)


def pin_manifest(manifest: Manifest, source: Path, *, allow_dirty: bool = False) -> tuple[Manifest, Pack | None]:
    """The manifest with ``code.pin`` set (and its pack cached), or unchanged when nothing is shipped."""
    code = manifest.code
    if code is not None and not code.enabled:
        return manifest, None
    repo = find_repo(source.resolve().parent)
    if repo is None:
        if code is not None:
            raise CodePackError(f"job {manifest.name}: {source} is in no git repository, so code: has nothing "
                                "to ship (git init and commit, or code: {enabled: false})")
        return manifest, None
    pack = build(repo, code or Code(), allow_dirty=allow_dirty, job=manifest.name)
    _save(pack)
    pinned = (code or Code()).model_copy(update={"pin": pack.pin})
    return manifest.model_copy(update={"code": pinned}), pack


def pin_loaded(loaded: Sequence[LoadedManifest], *, allow_dirty: bool = False
               ) -> tuple[list[LoadedManifest], list[Pack | None]]:
    """:func:`pin_manifest` for each loaded manifest; the content hash then covers the pin (a new commit is a
    changed job, applied as an update)."""
    out: list[LoadedManifest] = []
    packs: list[Pack | None] = []
    for m in loaded:
        manifest, pack = pin_manifest(m.manifest, m.source, allow_dirty=allow_dirty)
        out.append(LoadedManifest(manifest, m.source, content_hash(manifest)) if pack else m)
        packs.append(pack)
    return out, packs


def pack_bytes(code: Code) -> bytes:
    """The pinned pack's bytes, for a launch: the cache, else rebuilt at the pinned commit; sha256 checked."""
    pin = code.pin
    if pin is None:
        raise CodePackError("the job's code is not pinned (apply the manifest again)")
    cached = cache_dir() / pack_file_name(pin)
    if cached.exists():
        data = cached.read_bytes()
        if hashlib.sha256(data).hexdigest() == pin.sha256:
            return data
    if pin.dirty:
        raise CodePackError(f"the pack {pin.sha256[:12]} (with uncommitted changes) is no longer in {cache_dir()}: "
                            "apply the manifest again")
    repo = Path(pin.repo)
    commit = _git(repo, "rev-parse", "--verify", f"{pin.commit}^{{commit}}").decode().strip()
    data = _tar(_filter(_tracked(repo, commit, pin.path, False), code))
    if hashlib.sha256(data).hexdigest() != pin.sha256:
        raise CodePackError(f"rebuilt pack of {pin.commit[:12]} differs from the applied one: apply again")
    _save(Pack(pin, data))
    return data
