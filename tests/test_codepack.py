"""The code pack (orchestrator/runtime/codepack.py) and its unpacking by the agent: the applied commit's
tracked files, filtered, deterministic, size-limited, and the same bytes after the repository moved on."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from orchestrator.app.errors import BadInputError
from orchestrator.app.jobs import load, load_with_packs
from orchestrator.manifest.code_spec import Code
from orchestrator.runtime.codepack import CodePackError, pack_bytes, pin_manifest
from orchestrator.runtime.from_manifest import LaunchFacts, render_input_for
from orchestrator.runtime.render import render_agent_config
from tests.support.agent import load_agent

orch_agent = load_agent()

MANIFEST = """\
apiVersion: orch/v1
kind: Job
name: tiny
resources: {gpu: A100-80G}
run: {launcher: torchrun, script: train.py}
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def make_repo(tmp_path: Path, extra: str = "") -> Path:
    repo = tmp_path / "repo"
    (repo / "train" / "data").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.invalid")
    git(repo, "config", "user.name", "t")
    (repo / "train" / "train.py").write_text("print('v1')\n")
    (repo / "train" / "run.sh").write_text("#!/bin/sh\n")
    (repo / "train" / "run.sh").chmod(0o755)
    (repo / "train" / "data" / "big.bin").write_bytes(b"x" * 1000)
    (repo / "train" / ".orchignore").write_text("# data is staged by data:\ndata/\n")
    (repo / "README.md").write_text("top\n")
    (repo / "train" / "job.yaml").write_text(MANIFEST + extra)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v1")
    return repo


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_pins_the_commit_and_packs_the_sub_tree_without_ignored_files(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "code: {path: train, exclude: ['*.sh']}\n")
    [m], [pack] = load_with_packs([repo / "train" / "job.yaml"])
    assert pack is not None and m.manifest.code is not None and m.manifest.code.pin == pack.pin
    assert pack.pin.commit == git(repo, "rev-parse", "HEAD") and pack.pin.path == "train"
    assert sorted(members(pack.data)) == [".orchignore", "job.yaml", "train.py"]
    assert pack.pin.sha256 == hashlib.sha256(pack.data).hexdigest() and pack.pin.bytes == len(pack.data)
    assert pack.pin.files == 3 and not pack.notes


def test_default_is_the_whole_repository_and_equal_commits_give_equal_bytes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    [a] = load([repo / "train" / "job.yaml"])
    [b] = load([repo / "train" / "job.yaml"])
    assert a.content_hash == b.content_hash
    assert a.manifest.code is not None and a.manifest.code.pin is not None
    names = members(pack_bytes(a.manifest.code))
    assert "README.md" in names and "train/train.py" in names and "train/data/big.bin" in names
    assert names["train/run.sh"].mode == 0o755 and names["README.md"].mtime == 0


def test_uncommitted_changes_are_not_shipped_unless_asked_and_then_said(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "code: {path: train}\n")
    (repo / "train" / "train.py").write_text("print('uncommitted')\n")
    [_], [clean] = load_with_packs([repo / "train" / "job.yaml"])
    assert clean is not None and not clean.pin.dirty
    assert "NOT shipped" in clean.notes[0] and "train/train.py" in clean.notes[0]
    with tarfile.open(fileobj=io.BytesIO(clean.data), mode="r:gz") as tar:
        assert tar.extractfile("train.py").read() == b"print('v1')\n"  # type: ignore[union-attr]
    [_], [dirty] = load_with_packs([repo / "train" / "job.yaml"], allow_dirty=True)
    assert dirty is not None and dirty.pin.dirty and "UNCOMMITTED" in dirty.notes[0]
    assert dirty.pin.sha256 != clean.pin.sha256


def test_dirty_ships_what_its_note_names_files_added_and_renamed_but_not_committed(tmp_path: Path) -> None:
    """``--dirty`` said "shipping UNCOMMITTED changes of 1 tracked file: train/helper.py" for a file added with
    ``git add`` and shipped only HEAD's files: the job's import failed on the node. A rename's old name was
    counted as a change of its own, cut to garbage ("in/run.sh" for "train/run.sh")."""
    repo = make_repo(tmp_path, "code: {path: train}\n")
    (repo / "train" / "helper.py").write_text("x = 1\n")
    git(repo, "add", "train/helper.py")
    git(repo, "mv", "train/run.sh", "train/start.sh")
    [_], [dirty] = load_with_packs([repo / "train" / "job.yaml"], allow_dirty=True)
    assert dirty is not None and dirty.pin.dirty
    names = members(dirty.data)
    assert "helper.py" in names and "start.sh" in names and "run.sh" not in names
    assert names["start.sh"].mode == 0o755
    assert dirty.notes == ("job tiny: shipping UNCOMMITTED changes of 2 tracked files: train/helper.py, "
                           "train/start.sh",)
    [_], [clean] = load_with_packs([repo / "train" / "job.yaml"])
    assert clean is not None and "helper.py" not in members(clean.data) and "run.sh" in members(clean.data)


def test_what_a_commit_holds_but_the_pack_cannot_carry_is_said(tmp_path: Path) -> None:
    """A submodule (another repository) and a Git LFS pointer (the content is on an LFS server) were left out
    or shipped as pointers without a word: the job found an empty directory or a pointer for its weights."""
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    (lib / "x.py").write_text("x = 1\n")
    git(lib, "add", "-A")
    git(lib, "-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-q", "-m", "lib")
    repo = make_repo(tmp_path, "code: {path: train}\n")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "train/lib")
    (repo / "train" / "weights.bin").write_text("version https://git-lfs.github.com/spec/v1\n"
                                                 "oid sha256:" + "a" * 64 + "\nsize 123456789\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "lib and weights")
    [_], [pack] = load_with_packs([repo / "train" / "job.yaml"])
    assert pack is not None
    names = members(pack.data)
    assert "lib" not in names and "weights.bin" in names and pack.pin.files == len(names)
    assert pack.notes == (
        "job tiny: not shipped, 1 submodule (another repository; fetch it in setup, or bring it in the image): lib",
        "job tiny: 1 Git LFS file shipped as LFS pointers, not their content (stage large files with data:, or "
        "run git lfs pull in setup): weights.bin")
    [m] = load([repo / "train" / "job.yaml"])
    for cached in (tmp_path / "xdg-cache" / "orch" / "code").iterdir():
        cached.unlink()             # rebuilt at the pinned commit: the same bytes
    assert m.manifest.code is not None and pack_bytes(m.manifest.code) == pack.data


def test_a_relaunch_gets_the_applied_pack_after_the_repository_moved_on(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "code: {path: train}\n")
    [m] = load([repo / "train" / "job.yaml"])
    code = m.manifest.code
    assert code is not None and code.pin is not None
    (repo / "train" / "train.py").write_text("print('v2')\n")
    git(repo, "commit", "-q", "-am", "v2")
    for cached in (tmp_path / "xdg-cache" / "orch" / "code").iterdir():
        cached.unlink()             # not in the cache any more: rebuilt at the pinned commit, same sha256
    data = pack_bytes(code)
    assert hashlib.sha256(data).hexdigest() == code.pin.sha256
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert tar.extractfile("train.py").read() == b"print('v1')\n"  # type: ignore[union-attr]


def test_over_the_limit_is_a_clear_error_before_anything_launches(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "code: {path: train, limit_mb: 1}\n")
    (repo / "train" / "weights.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "weights")
    with pytest.raises(BadInputError, match=r"over code.limit_mb 1; largest: weights.bin \(2.0 MiB\)"):
        load([repo / "train" / "job.yaml"])


def test_explicit_code_outside_a_repository_is_an_error_and_default_ships_nothing(tmp_path: Path) -> None:
    plain = tmp_path / "job.yaml"
    plain.write_text(MANIFEST)
    [m] = load([plain])
    assert m.manifest.code is None
    plain.write_text(MANIFEST + "code: {path: .}\n")
    with pytest.raises(BadInputError, match="in no git repository"):
        load([plain])
    off = tmp_path / "off.yaml"
    off.write_text(MANIFEST + "code: {enabled: false}\n")
    assert load([off])[0].manifest.code == Code(enabled=False)


def test_path_outside_the_repository_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="inside the repository"):
        Code(path="../elsewhere")
    repo = make_repo(tmp_path)
    manifest = load([repo / "train" / "job.yaml"])[0].manifest
    with pytest.raises(CodePackError, match="not in commit"):
        pin_manifest(manifest.model_copy(update={"code": Code(path="missing")}), repo / "train" / "job.yaml")


def test_the_agent_unpacks_the_pack_into_its_work_dir_before_the_job(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path, "code: {path: train}\n")
    [m] = load([repo / "train" / "job.yaml"])
    assert m.manifest.code is not None
    config = json.loads(render_agent_config(render_input_for(m.manifest, LaunchFacts())))
    node = tmp_path / "node"
    node.mkdir()
    (node / config["code"]["file"]).write_bytes(pack_bytes(m.manifest.code))
    orch_agent.unpack_code(config["code"], str(node))
    assert (node / "train.py").read_text() == "print('v1')\n"
    assert (node / ".orch-code").read_text().strip() == config["code"]["sha256"]
    # An altered copy is refused, with the reason in the node's words.
    (node / ".orch-code").unlink()
    (node / config["code"]["file"]).write_bytes(b"not the pack")
    with pytest.raises(ValueError, match="does not match its sha256"):
        orch_agent.unpack_code(config["code"], str(node))


def _cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:   # click 8.2+: stderr is always separate
        runner = CliRunner()
    return runner.invoke(app, list(args))


def test_orch_render_of_the_example_shows_the_code_pack() -> None:
    root = Path(__file__).resolve().parents[1]
    head = git(root, "rev-parse", "HEAD")
    result = _cli("render", str(root / "examples" / "torchrun-ddp.yaml"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "# ===== code pack ====="
    assert lines[1].startswith(f"# commit {head[:12]}") and ", path examples: " in lines[1]
    files = int(lines[1].split(": ", 1)[1].split(" files")[0])
    assert files == len(git(root, "ls-tree", "-r", "--name-only", "HEAD", "--", "examples").splitlines())
    assert '"code": {' in result.stdout      # the agent's config names the pack it unpacks


def test_plan_and_apply_refuse_a_pack_over_the_limit_before_anything_launches(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "code: {path: train, limit_mb: 1}\n")
    (repo / "train" / "weights.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "weights")
    for command in ("plan", "apply"):
        result = _cli(command, str(repo / "train" / "job.yaml"), *(["--yes"] if command == "apply" else []))
        assert result.exit_code == 2, result.output
        assert "over code.limit_mb 1" in result.stderr and "weights.bin" in result.stderr


def test_plan_and_apply_refuse_a_missing_code_path_at_its_line_before_packing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, "code: {path: train/src}\n")
    job = repo / "train" / "job.yaml"
    line = len(MANIFEST.splitlines()) + 1
    for command in ("plan", "apply"):
        result = _cli(command, str(job), *(["--yes"] if command == "apply" else []))
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"{job}:{line}:14: code.path: 'train/src': no such directory"), \
            result.stderr
        assert "Traceback" not in result.stderr and "not in commit" not in result.stderr
