"""Render one node's startup script and agent config from a RenderInput. Pure and deterministic.

Same input, same bytes: every collection is emitted in a fixed order and every operand is quoted
with ``shlex.quote``. The script's skeleton lives in orchestrator/runtime/templates/startup.sh.tmpl (string.Template);
this module fills its sections. What each section does and why is in docs/runtime.md.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from string import Template

from orchestrator.engine.failure import SETUP_FAILED_EXIT
from orchestrator.runtime import fabric_env
from orchestrator.runtime.objectstore import StoreKind, StoreTarget, parse_store
from orchestrator.runtime.render_input import Launcher, NotifyVia, RenderInput, RenderInputError, ResumeVia

__all__ = [
    "AGENT_CONFIG_NAME",
    "AGENT_SCRIPT_NAME",
    "CHECKPOINT_MARKER",
    "LATEST_NAME",
    "SECRETS_ENV_NAME",
    "STARTUP_SCRIPT_NAME",
    "RenderedNode",
    "agent_source",
    "render_agent_config",
    "render_node",
    "render_script",
    "templates_dir",
]

STARTUP_SCRIPT_NAME = "startup.sh"
AGENT_SCRIPT_NAME = "orch_agent.py"
AGENT_CONFIG_NAME = "agent.json"
SECRETS_ENV_NAME = "secrets.env"
JOB_LOG_NAME = "job.log"
CHECKPOINT_MARKER = "COMPLETE"
LATEST_NAME = "LATEST"

_Q = shlex.quote


def templates_dir() -> Path:
    """The on-node templates, shipped inside the package (an installed wheel has them too)."""
    return Path(__file__).resolve().parent / "templates"


@cache
def _template() -> Template:
    return Template((templates_dir() / "startup.sh.tmpl").read_text(encoding="utf-8"))


def agent_source() -> bytes:
    """The agent's source, uploaded verbatim to every node."""
    return (templates_dir() / "agent" / AGENT_SCRIPT_NAME).read_bytes()


@dataclass(frozen=True)
class RenderedNode:
    """What goes onto one node: the startup script and the agent's JSON config (both text)."""

    script: str
    agent_config: str


def _nccl_env(ri: RenderInput) -> list[tuple[str, str]]:
    env: list[tuple[str, str]] = []
    if ri.interconnect == "nvlink":
        # Use GPU peer-to-peer only where GPUs share NVLink; never route P2P through the CPU.
        env.append(("NCCL_P2P_LEVEL", "NVL"))
    # PCIe: leave P2P to NCCL's topology detection. Disabling it costs bandwidth on healthy machines;
    # where a VM's P2P hangs, the manifest's env can set NCCL_P2P_DISABLE=1 (it overrides these).
    if ri.is_multi_node:
        if ri.fabric == fabric_env.TCPX:
            pass   # the NICs are found at boot (fabric_env.host_lines)
        elif ri.socket_ifname:
            env += [("GLOO_SOCKET_IFNAME", ri.socket_ifname), ("NCCL_SOCKET_IFNAME", ri.socket_ifname)]
        else:
            # A hint, not a choice: exclude loopback and docker bridges, let NCCL pick among the rest.
            env.append(("NCCL_SOCKET_IFNAME", "^lo,docker"))
        if not ri.infiniband:
            env.append(("NCCL_IB_DISABLE", "1"))
        # The fabric the machine was launched on: EFA's libfabric, TCPX's plugin settings (fabric_env).
        env += fabric_env.nccl_env(ri.fabric)
    user = {k for k, _ in ri.env}
    return sorted((k, v) for k, v in env if k not in user)


#: pipefail where the shell has it (bash, busybox, dash >= 0.5.12); POSIX sh before 2024 does not.
_PIPEFAIL = "if (set -o pipefail) 2>/dev/null; then set -o pipefail; fi"

#: Stands for node 0's address in a launcher line when it comes from orch's start.json (``master_from_start``).
_GIVEN_MASTER = "@ORCH_MASTER_ADDR@"


def _orch_env(ri: RenderInput) -> list[tuple[str, str]]:
    env = [
        ("ORCH_JOB_NAME", ri.job_name),
        ("ORCH_NNODES", str(ri.nodes)),
        ("ORCH_NODE_RANK", str(ri.node_rank)),
        ("ORCH_NPROC_PER_NODE", str(ri.gpus_per_node)),
        ("ORCH_MASTER_PORT", str(ri.master_port)),
    ]
    if not ri.master_from_start:
        env.append(("ORCH_MASTER_ADDR", ri.master_addr))
    if ri.checkpoint:
        env.append(("ORCH_CHECKPOINT_DIR", ri.checkpoint.local_dir))
        if ri.checkpoint.notify_via is NotifyVia.FILE:
            env.append(("ORCH_CHECKPOINT_NOW_FILE", ri.checkpoint.request_file))
        else:
            env.append(("ORCH_CHECKPOINT_SIGNAL", ri.checkpoint.notify_signal))
    return sorted(env)


def _stores(ri: RenderInput) -> tuple[StoreTarget | None, list[tuple[StoreTarget, str]]]:
    """The checkpoint store and the data sources that are stores (URLs are downloaded, see _fetch_sh)."""
    endpoint = ri.checkpoint.store_endpoint if ri.checkpoint else ""
    ckpt = parse_store(ri.checkpoint.store_uri, endpoint) if ri.checkpoint else None
    data = [(parse_store(d.source, endpoint), d.path) for d in ri.data if not d.is_url]
    return ckpt, data


def _rclone_env(ckpt: StoreTarget | None, data: list[tuple[StoreTarget, str]]) -> list[tuple[str, str]]:
    merged: dict[str, str] = {}
    for target in [ckpt, *(t for t, _ in data)]:
        if target is not None:
            merged.update(target.env)
    return sorted(merged.items())


def _section(title: str, lines: list[str]) -> str:
    return "\n".join([f"# {title}", *lines]) if lines else f"# {title}: none"


def _exports(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"export {k}={_Q(v)}" for k, v in pairs]


def _local_copy_sh(src: str, dest: str) -> str:
    return (f"mkdir -p {_Q(dest)} && if [ -d {_Q(src)} ]; then cp -R {_Q(src)}/. {_Q(dest)}/; "
            f"else cp {_Q(src)} {_Q(dest)}/; fi")


def _copy_sh(target: StoreTarget, src: str, dest: str) -> str:
    if target.kind is StoreKind.LOCAL:
        return _local_copy_sh(src, dest)
    return f"mkdir -p {_Q(dest)} && rclone copy {_Q(src)} {_Q(dest)}"


# Defined in the script only when a data source is a URL: curl with retries (wget, else python3, where a host
# has no curl), into DEST.part first, so an interrupted download never looks like the file.
_FETCH_FUNCTION = [
    "orch_fetch() {  # URL DEST",
    '  mkdir -p "$(dirname -- "$2")"',
    "  if command -v curl >/dev/null 2>&1; then",
    '    curl -fsSL --retry 5 --retry-delay 2 --retry-connrefused -o "$2.part" "$1"',
    "  elif command -v wget >/dev/null 2>&1; then",
    '    wget -q --tries=5 --waitretry=2 -O "$2.part" "$1"',
    "  else",
    "    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "
    '"$1" "$2.part"',
    "  fi",
    '  mv -f -- "$2.part" "$2"',
    "}",
]


def _data_lines(ri: RenderInput) -> list[str]:
    """Stage every data source, in the manifest's order: copy a store's path, download a URL."""
    endpoint = ri.checkpoint.store_endpoint if ri.checkpoint else ""
    lines = list(_FETCH_FUNCTION) if any(d.is_url for d in ri.data) else []
    for d in ri.data:
        if d.is_url:
            lines.append(f"orch_fetch {_Q(d.source)} {_Q(d.download_path)}")
        else:
            target = parse_store(d.source, endpoint)
            lines.append(_copy_sh(target, target.path, d.path))
    return lines


def _restore(ri: RenderInput, ckpt: StoreTarget | None) -> list[str]:
    if ri.checkpoint is None or ckpt is None:
        return []
    c = ri.checkpoint
    latest = ckpt.child("LATEST")
    cat = f"cat {_Q(latest)}" if ckpt.kind is StoreKind.LOCAL else f"rclone cat {_Q(latest)}"
    restore_to = '"$ORCH_CHECKPOINT_DIR/$orch_latest"'
    if ckpt.kind is StoreKind.LOCAL:
        fetch = (f'mkdir -p {restore_to} && cp -R {_Q(ckpt.path.rstrip("/"))}/"$orch_latest"/. '
                 f'{restore_to}/')
    else:
        fetch = f'mkdir -p {restore_to} && rclone copy {_Q(ckpt.path.rstrip("/"))}/"$orch_latest" {restore_to}'
    lines = [
        'mkdir -p "$ORCH_CHECKPOINT_DIR"',
        "ORCH_RESUME_PATH=''",
        f"orch_latest=\"$( ({cat} 2>/dev/null || true) | tr -d '[:space:]')\"",
        # Only a well-formed name: LATEST is data from the store, never a path to follow.
        'case "$orch_latest" in step-*[!0-9]*|step-) orch_latest="" ;; step-*) ;; *) orch_latest="" ;; esac',
        'if [ -n "$orch_latest" ]; then',
        f"  {fetch}",
        f'  if [ ! -f "$ORCH_CHECKPOINT_DIR/$orch_latest/{CHECKPOINT_MARKER}" ]; then',
        '    echo "orch: restored checkpoint $orch_latest has no ' + CHECKPOINT_MARKER + ' marker" >&2; exit 75',
        "  fi",
        '  ORCH_RESUME_PATH="$ORCH_CHECKPOINT_DIR/$orch_latest"',
        '  echo "orch: resuming from $ORCH_RESUME_PATH" >&2',
        "fi",
        "export ORCH_RESUME_PATH",
    ]
    if c.resume_via is ResumeVia.ENV and c.resume_name != "ORCH_RESUME_PATH":
        lines.append(f'if [ -n "$ORCH_RESUME_PATH" ]; then export {c.resume_name}="$ORCH_RESUME_PATH"; fi')
    return lines


def _launcher_argv(ri: RenderInput) -> list[str]:
    a = _GIVEN_MASTER if ri.master_from_start else ri.master_addr
    n, g, r, p = ri.nodes, ri.gpus_per_node, ri.node_rank, str(ri.master_port)
    if ri.launcher is Launcher.TORCHRUN:
        head = ["torchrun", "--nnodes", str(n), "--nproc-per-node", str(g), "--node-rank", str(r),
                "--master-addr", a, "--master-port", p]
    elif ri.launcher is Launcher.ACCELERATE:
        head = ["accelerate", "launch", *(["--multi_gpu"] if n * g > 1 else []), "--num_machines", str(n),
                "--num_processes", str(n * g), "--machine_rank", str(r), "--main_process_ip", a,
                "--main_process_port", p]
    else:
        head = ["deepspeed", "--num_nodes", str(n), "--num_gpus", str(g), "--master_addr", a, "--master_port", p,
                "--node_rank", str(r)]
        if ri.is_multi_node:
            # Each node launches its own ranks (no pdsh/ssh fan-out); the hostfile only states world shape.
            head += ["--no_ssh", "--hostfile", "hostfile"]
    return [*head, ri.script, *ri.args]


def _launch_lines(ri: RenderInput) -> list[str]:
    """The job's command: run on the host, or inside the container as ``sh -c``."""
    lines: list[str] = []
    if ri.setup:
        # A failed setup line exits with its own code, so orch can tell a setup failure from the command's. POSIX
        # sh has no ERR trap: under `set -e` a failing line exits the shell, and this EXIT trap (dropped once setup
        # is done) turns that exit into SETUP_FAILED_EXIT. Setup lines may open multi-line constructs, so they
        # are not wrapped one by one.
        lines += ["trap 'rc=$?; if [ \"$rc\" != 0 ]; then echo \"orch: setup failed (exit $rc)\" >&2; "
                  f"exit {SETUP_FAILED_EXIT}; fi' EXIT", *ri.setup, "trap - EXIT"]
    resume_arg = ri.checkpoint is not None and ri.checkpoint.resume_via is ResumeVia.ARG
    if resume_arg:
        assert ri.checkpoint is not None
        # POSIX sh has no arrays: the resume arguments are the script's positional parameters ("$@" is exempt
        # from set -u when empty).
        lines += ["set --",
                  'if [ -n "${ORCH_RESUME_PATH:-}" ]; then set -- '
                  f'{_Q(ri.checkpoint.resume_name)} "$ORCH_RESUME_PATH"; fi']
    tail = ' "$@"' if resume_arg else ""
    if ri.launcher is Launcher.COMMAND:
        # Verbatim shell, not exec'd: a command may be a pipeline or a list ("a && b").
        lines.append(f"{ri.command}{tail}")
    else:
        if ri.launcher is Launcher.DEEPSPEED and ri.is_multi_node:
            hosts = "".join(f"node-{i} slots={ri.gpus_per_node}\\n" for i in range(ri.nodes))
            lines.append(f"printf '{hosts}' > hostfile")
        line = "exec " + " ".join(_Q(x) for x in _launcher_argv(ri)) + tail
        lines.append(line.replace(_GIVEN_MASTER, '"$ORCH_MASTER_ADDR"'))
    return lines


def _given_master(ri: RenderInput) -> list[str]:
    if not ri.master_from_start:
        return []
    return ['export ORCH_MASTER_ADDR="${ORCH_MASTER_ADDR_GIVEN:?orch gave no master address (start.json)}"']


def _fabric(ri: RenderInput) -> str:
    """The fabric the startup script prepares: only a multi-node job's (one node talks to no peer)."""
    return ri.fabric if ri.is_multi_node else ""


def _docker_lines(ri: RenderInput, inner: list[str], passed_env: list[str]) -> list[str]:
    mounts = ['"$ORCH_WORK_DIR:$ORCH_WORK_DIR"']
    extra = sorted({p for p in [*(d.path for d in ri.data), *([ri.checkpoint.local_dir] if ri.checkpoint else [])]
                    if p.startswith("/")})
    mounts += [_Q(f"{p}:{p}") for p in extra]
    argv = ["exec docker run --rm", f"--name {_Q('orch-' + ri.job_name)}", "--gpus all", "--ipc=host",
            f"--shm-size={_Q(ri.shm_size)}", "--network host", *fabric_env.docker_args(_fabric(ri)),
            *(f"-v {m}" for m in mounts),
            '-w "$ORCH_WORK_DIR"', *(f"-e {name}" for name in passed_env), _Q(ri.image),
            "sh -c " + _Q("\n".join(["set -eu", _PIPEFAIL, *inner]))]
    return [" \\\n  ".join(argv)]


def render_script(ri: RenderInput) -> str:
    """The node's startup script. Deterministic: equal inputs give byte-identical output."""
    if ri.launcher is not Launcher.COMMAND and ri.gpus_per_node < 1:
        raise RenderInputError(f"launcher {ri.launcher.value!r} needs at least one process per node")
    ckpt, data = _stores(ri)
    orch_env, nccl = _orch_env(ri), _nccl_env(ri)
    c = ri.checkpoint
    secrets = [f': "${{{name}:?secret {name} is not set in the launch environment}}"' for name in ri.secrets]
    secrets += [f"export {name}" for name in ri.secrets]
    notify: list[str] = []
    if c is not None and c.notify_via is NotifyVia.SIGNAL:
        # The agent signals the whole process group; launchers (sh, torchrun) must not die of it.
        # An ignored signal stays ignored across exec, and the training script installs its own handler.
        notify.append(f"trap '' {c.notify_signal.removeprefix('SIG')}")
    if c is not None and c.notify_via is NotifyVia.FILE:
        notify.append('rm -f "$ORCH_CHECKPOINT_NOW_FILE"')
    inner = fabric_env.inner_lines(_fabric(ri)) + _launch_lines(ri)
    user_env = frozenset(k for k, _ in ri.env)
    fabric_host = fabric_env.host_lines(_fabric(ri), user_env=user_env)
    if ri.image:
        # ``-e NAME`` passes the host's value through without writing it on the command line.
        passed = {*(k for k, _ in orch_env), *(k for k, _ in nccl), *(k for k, _ in ri.env), *ri.secrets}
        if _fabric(ri) == fabric_env.TCPX:
            passed |= set(fabric_env.TCPX_NIC_ENV)
        if ri.master_from_start:
            passed.add("ORCH_MASTER_ADDR")
        if c is not None:
            passed.add("ORCH_RESUME_PATH")
            if c.resume_via is ResumeVia.ENV:
                passed.add(c.resume_name)
        launch = _docker_lines(ri, inner, sorted(passed))
    else:
        launch = inner
    text = _template().substitute(
        job_name=ri.job_name,
        node_rank=ri.node_rank,
        nodes=ri.nodes,
        launcher=ri.launcher.value,
        where=f"docker image {ri.image}" if ri.image else "on the host",
        pipefail=_PIPEFAIL,
        exports=_section("orch and job environment", _exports(orch_env) + _exports(list(ri.env)) + _given_master(ri)),
        secrets=_section("secrets (by name; values come from the launch environment)", secrets),
        nccl=_section(f"NCCL for {ri.interconnect}" + (", multi-node" if ri.is_multi_node else "")
                      + (" over InfiniBand" if ri.is_multi_node and ri.infiniband else "")
                      + (f", fabric {_fabric(ri)}" if _fabric(ri) else ""), fabric_host + _exports(nccl)),
        rclone=_section("rclone remotes (configuration only; credentials come from the environment)",
                        _exports(_rclone_env(ckpt, data))),
        data=_section("data staging", _data_lines(ri)),
        restore=_section("restore the latest committed checkpoint", _restore(ri, ckpt)),
        notify=_section("checkpoint-now notification", notify),
        launch=_section("launch", launch),
    )
    return text


def render_agent_config(ri: RenderInput) -> str:
    """The agent's JSON config (sorted keys, so deterministic). Holds no secret values."""
    ckpt, _ = _stores(ri)
    a = ri.agent
    checkpoint = None
    if ri.checkpoint is not None and ckpt is not None:
        c = ri.checkpoint
        checkpoint = {
            "dir": c.local_dir,
            "marker": CHECKPOINT_MARKER,
            "notify": {"via": c.notify_via.value, "signal": c.notify_signal, "file": c.request_file},
            "store": {"kind": ckpt.kind.value, "path": ckpt.path, "uri": ckpt.uri, "env": dict(ckpt.env)},
        }
    report = None
    if ri.report is not None:
        target = parse_store(ri.report.uri, ri.report.endpoint)
        report = {"kind": target.kind.value, "path": target.path, "uri": target.uri, "env": dict(target.env),
                  "interval_s": ri.report.interval_s, "log_chunk_bytes": ri.report.log_chunk_bytes,
                  "wait_for_start": ri.report.wait_for_start, "secrets": ri.report.secrets_from_store}
    config = {
        "version": 1,
        "job_name": ri.job_name,
        "node_rank": ri.node_rank,
        "nodes": ri.nodes,
        "command": ["sh", STARTUP_SCRIPT_NAME],
        "job_log": JOB_LOG_NAME,
        "status_path": a.status_path,
        "sample_interval_s": a.sample_interval_s,
        "notice_interval_s": a.notice_interval_s,
        "window": a.window,
        "cloud": a.cloud.value,
        "metadata": {"aws": a.aws_metadata_url, "gcp": a.gcp_metadata_url, "azure": a.azure_metadata_url},
        "checkpoint": checkpoint,
        "report": report,
    }
    if ri.code is not None:
        # The code pack, unpacked into the work dir before startup.sh runs setup.
        code: dict[str, object] = {"file": ri.code.file, "sha256": ri.code.sha256, "commit": ri.code.commit}
        if ri.code.store_uri:
            # A node that boots by itself fetches the pack from the job's store (orch puts it there before the go).
            src = parse_store(ri.code.store_uri, ri.code.store_endpoint)
            code["store"] = {"kind": src.kind.value, "path": src.path, "uri": src.uri, "env": dict(src.env)}
            code["object"] = ri.code.store_object
        config["code"] = code
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def render_node(ri: RenderInput) -> RenderedNode:
    return RenderedNode(script=render_script(ri), agent_config=render_agent_config(ri))
