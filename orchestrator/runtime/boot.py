"""The boot script: what a cloud machine runs at first boot (its user data) to start the job by itself.

It needs no inbound access: it unpacks orch's agent, the agent's config and the job's ``startup.sh`` into
the job's work dir under ``$ORCH_ROOT`` (default ``/var/lib/orch``), writes the values of the job's secrets
and store credentials to a 0600 ``secrets.env`` that the agent's start loads and deletes (the same start
line the SSH bootstrapper runs), installs rclone where a store needs it and the image lacks it, and starts
the agent detached. The agent runs the job and reports to the job's store (orchestrator/runtime/node_state.py).

Idempotent: a machine that runs its user data again on reboot (GCE runs its startup-script at every boot)
finds this launch's agent alive and starts no second one. Deterministic: equal inputs, equal bytes (the
payload is a gzip'd tar with fixed times). The script holds secret VALUES: it goes to the provider only,
never to a log, an event or the database; ``orch render`` shows names, not values.
"""

from __future__ import annotations

import base64
import gzip
import io
import shlex
import tarfile
import textwrap
import threading
from collections.abc import Mapping

from orchestrator.runtime.objectstore import StoreKind, parse_store
from orchestrator.runtime.render import (
    AGENT_CONFIG_NAME,
    AGENT_SCRIPT_NAME,
    SECRETS_ENV_NAME,
    STARTUP_SCRIPT_NAME,
    agent_source,
    render_node,
)
from orchestrator.runtime.render_input import RenderInput

__all__ = ["AGENT_PID_NAME", "DEFAULT_ROOT", "boot_files", "render_boot"]

DEFAULT_ROOT = "/var/lib/orch"
AGENT_PID_NAME = "agent.pid"
_Q = shlex.quote


def _compact(source: bytes) -> bytes:
    """The agent without docstrings and comments (``ast.unparse``: the same code), so that the boot script fits
    EC2's 16 KB of user data. The unpacked file is what runs; the full source is the package's."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return (ast.unparse(tree) + "\n").encode()


_COMPACT_LOCK = threading.Lock()
_compact_agent_bytes: bytes | None = None


def _compact_agent() -> bytes:
    """The compacted agent, made once per process under a lock: CPython 3.11's parser is not safe to run in
    several threads at once ("AST constructor recursion depth mismatch" when daemons tick in threads)."""
    global _compact_agent_bytes
    with _COMPACT_LOCK:
        if _compact_agent_bytes is None:
            _compact_agent_bytes = _compact(agent_source())
        return _compact_agent_bytes


def _payload(files: list[tuple[str, bytes, int]]) -> str:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    packed = gzip.compress(raw.getvalue(), compresslevel=9, mtime=0)
    return "\n".join(textwrap.wrap(base64.b64encode(packed).decode(), 76))


def _needs_rclone(ri: RenderInput) -> bool:
    uris = [ri.checkpoint.store_uri] if ri.checkpoint else []
    uris += [ri.report.uri] if ri.report else []
    uris += [d.source for d in ri.data if not d.is_url]
    return any(parse_store(u).kind is StoreKind.RCLONE for u in uris)


def render_boot(ri: RenderInput, env_values: Mapping[str, str], launch_id: str) -> str:
    """The machine's boot script. ``env_values``: name -> value of the job's secrets and the store credentials
    the machine has no identity for (see store_credentials); written only into ``secrets.env``."""
    node = render_node(ri)
    work = f"$ORCH_ROOT/{ri.resolved_work_dir}"
    files = [(AGENT_SCRIPT_NAME, _compact_agent(), 0o755),
             (AGENT_CONFIG_NAME, node.agent_config.encode(), 0o644),
             (STARTUP_SCRIPT_NAME, node.script.encode(), 0o755)]
    mark = _Q(f"ORCH_LAUNCH_ID={launch_id}")
    lines = [
        "#!/usr/bin/env bash",
        f"# orch boot script: job {ri.job_name}, node {ri.node_rank} of {ri.nodes}, launch {launch_id}.",
        "# Installs orch's agent and starts it; the agent runs the job and reports to its store (outbound only).",
        "set -euo pipefail",
        "umask 077",
        f'ORCH_ROOT="${{ORCH_ROOT:-{DEFAULT_ROOT}}}"',
        f'mkdir -p "{work}" && cd "{work}"',
        f"if [ -f {AGENT_PID_NAME} ] && kill -0 \"$(cat {AGENT_PID_NAME})\" 2>/dev/null "
        f"&& grep -qsF {mark} {STARTUP_SCRIPT_NAME}; then",
        f'  echo "orch: the agent of launch {launch_id} already runs"; exit 0',
        "fi",
        "base64 -d <<'ORCH_PAYLOAD' | tar -xzf - --no-same-owner",
        _payload(files),
        "ORCH_PAYLOAD",
        f"chmod 0755 {AGENT_SCRIPT_NAME} {STARTUP_SCRIPT_NAME} && chmod 0644 {AGENT_CONFIG_NAME}",
    ]
    if _needs_rclone(ri):
        lines.append("command -v rclone >/dev/null 2>&1 || (curl -fsSL https://rclone.org/install.sh | bash)")
    if env_values:
        # base64, so no value (a JSON key has newlines) can end the here-document early.
        text = "".join(f"export {k}={_Q(v)}\n" for k, v in sorted(env_values.items())).encode()
        lines += [f"base64 -d > {SECRETS_ENV_NAME} <<'ORCH_SECRETS'",
                  *textwrap.wrap(base64.b64encode(text).decode(), 76), "ORCH_SECRETS"]
    # As the SSH bootstrapper's start line (secrets loaded into the agent's environment, the file deleted), but
    # with ``&`` on the agent alone: a backgrounded list would keep a shell holding the boot's stdout open.
    env = SECRETS_ENV_NAME
    lines += [f"if [ -f {env} ]; then set -a; . ./{env}; set +a; rm -f {env}; fi",
              f"setsid nohup python3 {AGENT_SCRIPT_NAME} --config {AGENT_CONFIG_NAME} > agent.log 2>&1 < /dev/null &",
              f"echo $! > {AGENT_PID_NAME}"]
    return "\n".join(lines) + "\n"


def boot_files(script: str) -> dict[str, bytes]:
    """The files a boot script unpacks (name -> bytes): the inverse of the payload, for tests and inspection."""
    lines = script.splitlines()
    start = lines.index("base64 -d <<'ORCH_PAYLOAD' | tar -xzf - --no-same-owner") + 1
    end = lines.index("ORCH_PAYLOAD", start)
    raw = gzip.decompress(base64.b64decode("".join(lines[start:end])))
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
