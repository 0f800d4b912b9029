"""The real boot script on a machine that has only ``sh``, ``python3`` and coreutils: no bash, curl, wget, unzip,
tar, gzip or Docker (Vast's default ``pytorch/pytorch:*-runtime`` image has no curl and no unzip). It unpacks the
agent, installs the pinned rclone (served here from a file:// URL) only after its sha256 matched, and the agent
comes up and reports to its store. It is started the way a pod starts it: decoded from ``$ORCH_BOOT_B64``."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.boot import RCLONE, RclonePin, boot_env, render_boot
from orchestrator.runtime.from_manifest import LaunchFacts, render_input_for
from orchestrator.runtime.node_state import STATUS_OBJECT
from providers.boot_env import BOOT_ENV, boot_env_value, run_boot_from_env

SECRET = "hf-secret-value-0123456789"
LAUNCH = "lmin000000001"
_FIXED_COREUTILS = ("cat", "chmod", "cp", "dirname", "echo", "env", "false", "head", "id", "ln", "ls", "mkdir", "mv",
                    "printf", "rm", "sleep", "tail", "test", "touch", "tr", "true", "uname")
_ABSENT = ("bash", "curl", "wget", "unzip", "tar", "gzip", "gunzip", "docker", "rclone")


def _coreutils() -> list[Path]:
    """coreutils' programs (dpkg's list where there is one, else a fixed list), as found on this machine."""
    listed: list[str] = []
    if shutil.which("dpkg"):
        out = subprocess.run(["dpkg", "-L", "coreutils"], capture_output=True, text=True, check=False).stdout
        listed = [Path(p).name for p in out.split() if "/bin/" in p]
    found = [shutil.which(n, path="/usr/bin:/bin") for n in (listed or _FIXED_COREUTILS)]
    return [Path(f) for f in found if f]


@pytest.fixture
def minimal_path(tmp_path: Path) -> str:
    """A PATH of one directory: sh (dash where installed, never bash), python3 and coreutils, as symlinks."""
    bin_dir = tmp_path / "minbin"
    bin_dir.mkdir()
    sh = shutil.which("dash") or shutil.which("sh")     # dash where there is one: a strictly POSIX sh
    assert sh is not None and Path(os.path.realpath(sh)).name != "bash"
    (bin_dir / "sh").symlink_to(os.path.realpath(sh))
    (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))
    for prog in _coreutils():
        if not (bin_dir / prog.name).exists():
            (bin_dir / prog.name).symlink_to(prog)
    for absent in _ABSENT:
        assert not (bin_dir / absent).exists(), absent
    return str(bin_dir)


def _fake_rclone_pin(tmp_path: Path, *, sha: str | None = None) -> tuple[RclonePin, bytes]:
    """A zip laid out as rclone's release (``rclone-vX-linux-ARCH/rclone``) served from a file:// URL."""
    binary = b"#!/bin/sh\necho fake rclone \"$@\"\n"
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as zf:
        zf.writestr("rclone-v0-linux-test/README.txt", "readme")
        zf.writestr("rclone-v0-linux-test/rclone", binary)
    path = tmp_path / "rclone.zip"
    path.write_bytes(raw.getvalue())
    digest = sha or hashlib.sha256(raw.getvalue()).hexdigest()
    zips = tuple((arch, path.as_uri(), digest) for arch in ("amd64", "arm64"))
    return RclonePin("v0-test", zips), binary


def _script(tmp_path: Path, pin: RclonePin) -> str:
    """A command job that reads an s3:// data set (so the node needs rclone) and reports to a local store."""
    m = Manifest.model_validate({
        "apiVersion": "orch/v1", "kind": "Job", "name": "tiny", "resources": {"gpu": "A100-80G", "count": 1},
        "run": {"launcher": "command", "command": "echo hi"}, "secrets": ["HF_TOKEN"],
        "data": [{"source": "s3://bucket/set", "path": "/data/set"}]})
    facts = LaunchFacts(launch_id=LAUNCH, state_store=f"file://{tmp_path}/store", report_interval_s=0.05,
                        sample_interval_s=0.05, notice_interval_s=0.05)
    ri = render_input_for(m, facts)
    assert ri.report is not None
    ri = replace(ri, report=replace(ri.report, wait_for_start=True))   # the node waits for orch's go
    return render_boot(ri, {"HF_TOKEN": SECRET, "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}, LAUNCH,
                       rclone=pin)


def _boot_as_a_pod(script: str, root: Path, path: str) -> subprocess.CompletedProcess[str]:
    """As Vast's onstart / RunPod's dockerArgs do: decode $ORCH_BOOT_B64 with python3, run it with sh."""
    root.mkdir()
    env = {"PATH": path, "HOME": str(root), "ORCH_ROOT": str(root), BOOT_ENV: boot_env_value(script)}
    line = run_boot_from_env(str(root / "orch-boot.sh"), str(root / "orch-boot.log"))
    return subprocess.run(["sh", "-c", line], cwd=root, env=env, capture_output=True, text=True, timeout=60,
                          executable=os.path.join(path, "sh"))


def _wait_for(path: Path, timeout_s: float = 60.0) -> bytes:
    """Until the node's agent wrote ``path`` (an event), bounded so a hang fails."""
    end = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < end, f"timed out waiting for {path}"
        time.sleep(0.05)
    return path.read_bytes()


def test_the_boot_runs_with_only_sh_python3_and_coreutils(tmp_path: Path, minimal_path: str) -> None:
    pin, binary = _fake_rclone_pin(tmp_path)
    script = _script(tmp_path, pin)
    assert script.startswith("#!/bin/sh\n") and SECRET not in script
    assert boot_env(script)["HF_TOKEN"] == SECRET
    root = tmp_path / "node"
    done = _boot_as_a_pod(script, root, minimal_path)
    assert done.returncode == 0, (done.stderr, (root / "orch-boot.log").read_text())
    work = root / ".orch" / "jobs" / "tiny"
    pid = int((work / "agent.pid").read_text())
    try:
        # rclone was installed from the pinned zip, after its sha256 matched.
        assert (root / "bin" / "rclone").read_bytes() == binary
        status = json.loads(_wait_for(tmp_path / "store" / "tiny" / LAUNCH / STATUS_OBJECT))
        assert status["job"]["state"] == "pending"          # the agent is up and waits for orch's go
        # No secret value on disk: it went to the agent's environment only.
        kept = [p for p in root.rglob("*") if p.is_file() and p.name != "orch-boot.sh"
                and SECRET.encode() in p.read_bytes()]
        assert kept == []
    finally:
        os.kill(pid, signal.SIGKILL)


def test_an_rclone_download_whose_sha256_differs_starts_nothing(tmp_path: Path, minimal_path: str) -> None:
    pin, _ = _fake_rclone_pin(tmp_path, sha="0" * 64)
    root = tmp_path / "node"
    done = _boot_as_a_pod(_script(tmp_path, pin), root, minimal_path)
    log = (root / "orch-boot.log").read_text()
    assert done.returncode != 0 and "does not match its sha256" in log
    assert not (root / "bin" / "rclone").exists()
    assert not (root / ".orch" / "jobs" / "tiny" / "agent.pid").exists()


def test_the_pinned_rclone_is_a_versioned_release_with_a_sha256_per_architecture() -> None:
    assert RCLONE.version.startswith("v1.")
    assert {arch for arch, _, _ in RCLONE.zips} == {"amd64", "arm64"}
    for arch, url, sha in RCLONE.zips:
        assert url == f"https://downloads.rclone.org/{RCLONE.version}/rclone-{RCLONE.version}-linux-{arch}.zip"
        assert len(sha) == 64 and int(sha, 16) >= 0


#: The job's command: records the arguments startup.sh gave it (the resume arguments, "$@") and that its
#: secret reached it, then exits 0.
_PROBE = ("python3 -c 'import json, os, sys; json.dump({\"argv\": sys.argv[1:], "
          f"\"secret\": os.environ.get(\"HF_TOKEN\") == \"{SECRET}\"}}, open(\"ran.json\", \"w\"))'")


def _job_ended(status: Path, timeout_s: float = 60.0) -> dict[str, object]:
    """The job's part of the agent's report once it has ended (bounded so a hang fails)."""
    end = time.monotonic() + timeout_s
    while True:
        job = json.loads(status.read_bytes())["job"] if status.exists() else {}
        if job.get("state") in ("exited", "failed"):
            return dict(job)
        assert time.monotonic() < end, f"the job did not end: {job}"
        time.sleep(0.05)


def test_the_jobs_startup_sh_runs_under_a_posix_sh_with_no_bash(tmp_path: Path, minimal_path: str) -> None:
    """Not only the boot: the job's own startup.sh (secrets check, rclone remotes, data staging, restore of the
    store's LATEST, the resume arguments, the launch) runs under dash with only python3 and coreutils."""
    pin, _ = _fake_rclone_pin(tmp_path)
    m = Manifest.model_validate({
        "apiVersion": "orch/v1", "kind": "Job", "name": "tiny", "resources": {"gpu": "A100-80G", "count": 1},
        "run": {"launcher": "command", "command": _PROBE}, "secrets": ["HF_TOKEN"],
        "data": [{"source": "s3://bucket/set", "path": "/data/set"}],
        "checkpoint": {"path": "ckpt", "store": "s3://bucket/ckpt", "resume": {"arg": "--resume-from"}}})
    facts = LaunchFacts(launch_id=LAUNCH, state_store=f"file://{tmp_path}/store", report_interval_s=0.05,
                        sample_interval_s=0.05, notice_interval_s=0.05)
    ri = render_input_for(m, facts)
    ri = replace(ri, data=())    # /data is not writable here; staging a store path is rclone copy (run above)
    script = render_boot(ri, {"HF_TOKEN": SECRET, "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"},
                         LAUNCH, rclone=pin)
    root = tmp_path / "node"
    done = _boot_as_a_pod(script, root, minimal_path)
    assert done.returncode == 0, (done.stderr, (root / "orch-boot.log").read_text())
    work = root / ".orch" / "jobs" / "tiny"
    pid = int((work / "agent.pid").read_text())
    try:
        assert (work / "startup.sh").read_text().startswith("#!/bin/sh\n")
        job = _job_ended(work / "status.json")      # the agent's own status file (its reports go to the s3 store)
        assert (job["state"], job["exit_code"]) == ("exited", 0), (work / "job.log").read_text()
        # The fake rclone's "LATEST" is not a checkpoint name: nothing restored, no resume arguments.
        assert json.loads((work / "ran.json").read_text()) == {"argv": [], "secret": True}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class _OneFile:
    """Serves one body at any path on 127.0.0.1 (a mirror, or a man in the middle, of rclone's download)."""

    def __init__(self, body: bytes) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/rclone-v0-test-linux.zip"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_tampered_rclone_archive_served_over_http_is_refused(tmp_path: Path, minimal_path: str) -> None:
    """The pin holds the genuine archive's sha256; what the node downloads (over HTTP, here from 127.0.0.1) has a
    different rclone inside. The boot refuses it, says why, installs nothing and starts no agent."""
    genuine, _ = _fake_rclone_pin(tmp_path)
    tampered = io.BytesIO()
    with zipfile.ZipFile(tampered, "w") as zf:
        zf.writestr("rclone-v0-linux-test/README.txt", "readme")
        zf.writestr("rclone-v0-linux-test/rclone", b"#!/bin/sh\necho owned\n")
    served = _OneFile(tampered.getvalue())
    try:
        pin = RclonePin(genuine.version, tuple((arch, served.url, sha) for arch, _, sha in genuine.zips))
        root = tmp_path / "node"
        done = _boot_as_a_pod(_script(tmp_path, pin), root, minimal_path)
    finally:
        served.close()
    log = (root / "orch-boot.log").read_text()
    assert done.returncode != 0
    assert "orch: the rclone download does not match its sha256; not starting" in log
    assert not (root / "bin" / "rclone").exists()
    assert not (root / ".orch" / "jobs" / "tiny" / "agent.pid").exists()
