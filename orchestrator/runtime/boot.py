"""The boot script: what a cloud machine runs at first boot (its user data) to start the job by itself.

It needs only ``sh`` and ``python3`` on the node (no bash, curl, unzip, tar or base64): a POSIX ``sh`` line hands
a small Python program to ``python3``, which unpacks orch's agent, the agent's config and the job's ``startup.sh``
into the job's work dir under ``$ORCH_ROOT`` (default ``/var/lib/orch``), installs rclone where a store needs it
and the node lacks it (a pinned release, downloaded with urllib and checked against its sha256 before it is
unzipped with zipfile: see ``RclonePin``), and starts the agent detached with the job's secrets and the store
credentials the machine has no identity for in the agent's environment (never written to a file on the node).
The agent runs the job and reports to the job's store (orchestrator/runtime/node_state.py).

Idempotent: a machine that runs its user data again on reboot (GCE runs its startup-script at every boot)
finds this launch's agent alive and starts no second one. Deterministic: equal inputs, equal bytes (the
payload is a gzip'd tar with fixed times). The script holds secret VALUES: it goes to the provider only,
never to a log, an event or the database; ``orch render`` shows names, not values.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import shlex
import tarfile
import textwrap
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.runtime.agent_app import agent_zipapp
from orchestrator.runtime.objectstore import StoreKind, parse_store
from orchestrator.runtime.render import (
    AGENT_CONFIG_NAME,
    AGENT_SCRIPT_NAME,
    STARTUP_SCRIPT_NAME,
    render_node,
)
from orchestrator.runtime.render_input import RenderInput

__all__ = ["AGENT_PID_NAME", "DEFAULT_ROOT", "RCLONE", "RclonePin", "boot_files", "render_boot"]

DEFAULT_ROOT = "/var/lib/orch"
AGENT_PID_NAME = "agent.pid"
_Q = shlex.quote
_PAYLOAD_LINE = "P = ("   # opens the payload literal in the boot program (boot_files finds it by this line)
_BOOT_MEMBER = "orch_boot.py"     # the boot program, a member of the payload
_ENV_MEMBER = "orch_env.json"     # the environment values, a member of the payload (read into memory only)


@dataclass(frozen=True)
class RclonePin:
    """One rclone release for the node: per CPU architecture (rclone's names, ``amd64``/``arm64``), its zip's
    URL and sha256. The boot refuses a download whose sha256 differs (the agent is then not started)."""

    version: str
    zips: tuple[tuple[str, str, str], ...]   # (arch, url, sha256)


def _release(version: str, sums: dict[str, str]) -> RclonePin:
    base = f"https://downloads.rclone.org/{version}/rclone-{version}-linux"
    return RclonePin(version, tuple((arch, f"{base}-{arch}.zip", sha) for arch, sha in sorted(sums.items())))


#: The rclone orch installs: the sums are those rclone publishes for this release
#: (https://downloads.rclone.org/v1.75.0/SHA256SUMS, as pinned by several public projects); change them with the
#: version, from that file.
RCLONE = _release("v1.75.0", {
    "amd64": "aa2804e08f48250e71009c727124b6341cd0288465804a9a09d14663cabafbaa",
    "arm64": "d0ad88ba4c8e285b7c9efa591e0ab643280a91741e13c27f3a9c0957ccfa5203",
})


def _compact(source: bytes) -> bytes:
    """One agent module without docstrings, comments and type annotations (``ast.unparse``: the same code; each
    module imports ``annotations`` from __future__, so annotations are never evaluated), so that the boot script
    fits EC2's 16 KB of user data. The shipped zipapp is what runs; the full source is the package's."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node.returns = None
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]:
                arg.annotation = None
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and not isinstance(node, ast.ClassDef):
                # ``x: T = v`` -> ``x = v`` (not in a class body, where a dataclass or NamedTuple reads them);
                # a bare ``x: T`` (a declaration) stays.
                setattr(node, field, [ast.copy_location(ast.Assign([st.target], st.value), st)
                                      if isinstance(st, ast.AnnAssign) and st.value is not None else st
                                      for st in stmts])
    return (ast.unparse(ast.fix_missing_locations(tree)) + "\n").encode()


_COMPACT_LOCK = threading.Lock()
_compact_agent_bytes: bytes | None = None


#: How often the agent's compaction is tried when CPython 3.11's shared AST state trips it (below).
_COMPACT_TRIES = 3


def compacted_agent() -> bytes:
    """The agent's zipapp of compacted modules (``_compact``), made once per process under a lock. CPython 3.11
    keeps one AST recursion counter for all threads (python/cpython gh-106905): a parse in another thread at the
    same moment (3.11's traceback formatting parses source lines for its carets, e.g. a daemon thread logging an
    exception) makes ours raise SystemError("AST constructor recursion depth mismatch"). The parses are pure, so
    the whole build is tried again; and the startup renderer makes it when it is built
    (orchestrator/runtime/startup.py), before any tick runs."""
    global _compact_agent_bytes
    with _COMPACT_LOCK:
        for tries_left in range(_COMPACT_TRIES - 1, -1, -1):
            if _compact_agent_bytes is not None:
                break
            try:
                _compact_agent_bytes = agent_zipapp(_compact)
            except SystemError as exc:
                if tries_left == 0 or "recursion depth mismatch" not in str(exc):
                    raise
        assert _compact_agent_bytes is not None
        return _compact_agent_bytes


def _b85_lines(data: bytes) -> list[str]:
    """``data`` as base85 in 76-column string literals (one Python expression inside parentheses). Base85 costs
    25% where base64 costs 33%, and its alphabet has no quote or backslash, so a literal cannot be ended early."""
    return [f' "{chunk}"' for chunk in textwrap.wrap(base64.b85encode(data).decode(), 76)] or [' ""']


def _payload(files: list[tuple[str, bytes, int]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=9, mtime=0)


def _needs_rclone(ri: RenderInput) -> bool:
    uris = [ri.checkpoint.store_uri] if ri.checkpoint else []
    uris += [ri.report.uri] if ri.report else []
    uris += [d.source for d in ri.data if not d.is_url]
    return any(parse_store(u).kind is StoreKind.RCLONE for u in uris)


# The boot program (Python 3.6+, standard library only), shipped compressed in the payload and run by the loader
# in the script. Its inputs: W (work dir under ORCH_ROOT), M (this launch's mark in startup.sh), L (launch id),
# R (rclone zips per architecture, or {}), T (the payload, an open tar). The environment values are a member of T
# read into memory only: never written to the node's disk.
_PROGRAM = f"""\
import hashlib, json, os, platform, shutil, subprocess, sys, time, urllib.request, zipfile
root = os.environ.get("ORCH_ROOT") or "{DEFAULT_ROOT}"
os.makedirs(os.path.join(root, W), exist_ok=True)
os.chdir(os.path.join(root, W))
try:
    pid = int(open("{AGENT_PID_NAME}").read())
    os.kill(pid, 0)
    # After a reboot the recorded pid may be any process's: only this work dir's agent counts.
    if os.path.isdir("/proc/self") and (b"{AGENT_SCRIPT_NAME}" not in open("/proc/%d/cmdline" % pid, "rb").read()
                                        or os.path.realpath("/proc/%d/cwd" % pid) != os.getcwd()):
        raise OSError("not the agent")
    if M in open("{STARTUP_SCRIPT_NAME}").read():
        print("orch: the agent of launch " + L + " already runs")
        sys.exit(0)
except (OSError, ValueError):
    pass
files = [T.getmember(n) for n in ("{AGENT_SCRIPT_NAME}", "{AGENT_CONFIG_NAME}", "{STARTUP_SCRIPT_NAME}")]
T.extractall(".", members=files, **({{"filter": "data"}} if hasattr(tarfile, "data_filter") else {{}}))
env = dict(os.environ, **json.loads(T.extractfile("{_ENV_MEMBER}").read().decode()))
if R and not shutil.which("rclone"):
    arch = {{"x86_64": "amd64", "aarch64": "arm64"}}.get(platform.machine().lower(), platform.machine().lower())
    if arch not in R:
        sys.exit("orch: no rclone for this machine's architecture " + arch)
    url, sha = R[arch]
    for i in range(5):
        try:
            data = urllib.request.urlopen(url, timeout=300).read()
            break
        except OSError as exc:
            if i == 4:
                sys.exit("orch: rclone download failed: %s" % exc)
            time.sleep(2 * (i + 1))
    if hashlib.sha256(data).hexdigest() != sha:
        sys.exit("orch: the rclone download does not match its sha256; not starting")
    zf = zipfile.ZipFile(io.BytesIO(data))
    binary = [n for n in zf.namelist() if n.endswith("/rclone") or n == "rclone"][0]
    os.makedirs(os.path.join(root, "bin"), exist_ok=True)
    with open(os.path.join(root, "bin", "rclone"), "wb") as fh:
        fh.write(zf.read(binary))
    os.chmod(os.path.join(root, "bin", "rclone"), 0o755)
    env["PATH"] = os.path.join(root, "bin") + os.pathsep + env.get("PATH", "")
os.chmod("{AGENT_SCRIPT_NAME}", 0o755)
os.chmod("{STARTUP_SCRIPT_NAME}", 0o755)
os.chmod("{AGENT_CONFIG_NAME}", 0o644)
log = open("agent.log", "ab")
agent = subprocess.Popen([sys.executable, "{AGENT_SCRIPT_NAME}", "--config", "{AGENT_CONFIG_NAME}"], stdout=log,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
with open("{AGENT_PID_NAME}", "w") as fh:
    fh.write(str(agent.pid))
"""

#: The loader: opens the payload and runs the boot program in it (W, M, L, R and T in its globals).
_LOADER = ("import base64, gzip, io, tarfile\n"
           "T = tarfile.open(fileobj=io.BytesIO(gzip.decompress(base64.b85decode(P))), mode='r')\n"
           f"exec(T.extractfile('{_BOOT_MEMBER}').read())")


def render_boot(ri: RenderInput, env_values: Mapping[str, str], launch_id: str, *,
                rclone: RclonePin = RCLONE) -> str:
    """The machine's boot script. ``env_values``: name -> value of the job's secrets and the store credentials
    the machine has no identity for (see store_credentials); they reach only the agent's environment.
    ``rclone``: the release to install where a store needs rclone and the node has none (tests serve their own)."""
    node = render_node(ri)
    env = json.dumps(dict(sorted(env_values.items())), separators=(",", ":")).encode()
    files = [(AGENT_SCRIPT_NAME, compacted_agent(), 0o755),
             (AGENT_CONFIG_NAME, node.agent_config.encode(), 0o644),
             (STARTUP_SCRIPT_NAME, node.script.encode(), 0o755),
             (_BOOT_MEMBER, _PROGRAM.encode(), 0o600),
             (_ENV_MEMBER, env, 0o600)]
    zips = {arch: [url, sha] for arch, url, sha in rclone.zips} if _needs_rclone(ri) else {}
    lines = [
        "#!/bin/sh",
        f"# orch boot script: job {ri.job_name}, node {ri.node_rank} of {ri.nodes}, launch {launch_id}.",
        "# Needs sh and python3 only. Installs orch's agent and starts it; the agent runs the job and reports to",
        "# its store (outbound only).",
        "umask 077",
        "exec python3 - <<'ORCH_BOOT'",
        f"W = {json.dumps(ri.resolved_work_dir)}",
        f"M = {json.dumps(f'ORCH_LAUNCH_ID={launch_id}')}",
        f"L = {json.dumps(launch_id)}",
        f"R = {json.dumps(zips, sort_keys=True)}",
        _PAYLOAD_LINE, *_b85_lines(_payload(files)), ")",
        _LOADER,
        "ORCH_BOOT",
    ]
    return "\n".join(lines) + "\n"


def _members(script: str) -> dict[str, bytes]:
    lines = script.splitlines()
    start = lines.index(_PAYLOAD_LINE) + 1
    end = lines.index(")", start)
    raw = gzip.decompress(base64.b85decode("".join(line.strip().strip('"') for line in lines[start:end])))
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def boot_files(script: str) -> dict[str, bytes]:
    """The files a boot script unpacks (name -> bytes): the inverse of the payload, for tests and inspection."""
    return {k: v for k, v in _members(script).items() if k not in (_BOOT_MEMBER, _ENV_MEMBER)}


def boot_env(script: str) -> dict[str, str]:
    """The environment values a boot script hands its agent (name -> value), for tests and inspection."""
    return dict(json.loads(_members(script)[_ENV_MEMBER]))
