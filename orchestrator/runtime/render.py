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

from orchestrator.runtime import fabric_env
from orchestrator.runtime.objectstore import parse_store
from orchestrator.runtime.render_input import Launcher, NotifyVia, RenderInput, RenderInputError, ResumeVia
from orchestrator.runtime.render_launch import PIPEFAIL, docker_lines, given_master, launch_lines, node_fabric
from orchestrator.runtime.render_staging import (
    CHECKPOINT_MARKER,
    LATEST_NAME,
    data_lines,
    rclone_env,
    restore_lines,
    stores,
)
from providers.gpus import Interconnect

__all__ = [
    "AGENT_CONFIG_NAME",
    "AGENT_SCRIPT_NAME",
    "CHECKPOINT_MARKER",
    "LATEST_NAME",
    "SECRETS_ENV_NAME",
    "STARTUP_SCRIPT_NAME",
    "RenderedNode",
    "render_agent_config",
    "render_node",
    "render_script",
    "templates_dir",
]

STARTUP_SCRIPT_NAME = "startup.sh"
#: The agent on the node: one zipapp (orchestrator/runtime/agent_app.py), run as ``python3 orch_agent.pyz``.
AGENT_SCRIPT_NAME = "orch_agent.pyz"
AGENT_CONFIG_NAME = "agent.json"
SECRETS_ENV_NAME = "secrets.env"
JOB_LOG_NAME = "job.log"

_Q = shlex.quote


def templates_dir() -> Path:
    """The on-node templates, shipped inside the package (an installed wheel has them too)."""
    return Path(__file__).resolve().parent / "templates"


@cache
def _template() -> Template:
    return Template((templates_dir() / "startup.sh.tmpl").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class RenderedNode:
    """What goes onto one node: the startup script and the agent's JSON config (both text)."""

    script: str
    agent_config: str


def _nccl_env(ri: RenderInput) -> list[tuple[str, str]]:
    env: list[tuple[str, str]] = []
    if ri.interconnect is Interconnect.NVLINK:
        # Use GPU peer-to-peer only where GPUs share NVLink; never route P2P through the CPU.
        env.append(("NCCL_P2P_LEVEL", "NVL"))
    # PCIe: leave P2P to NCCL's topology detection. Disabling it costs bandwidth on healthy machines;
    # where a VM's P2P hangs, the manifest's env can set NCCL_P2P_DISABLE=1 (it overrides these).
    if ri.is_multi_node:
        if ri.fabric is fabric_env.TCPX:
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


def _section(title: str, lines: list[str]) -> str:
    return "\n".join([f"# {title}", *lines]) if lines else f"# {title}: none"


def _exports(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"export {k}={_Q(v)}" for k, v in pairs]


def render_script(ri: RenderInput) -> str:
    """The node's startup script. Deterministic: equal inputs give byte-identical output."""
    if ri.launcher is not Launcher.COMMAND and ri.gpus_per_node < 1:
        raise RenderInputError(f"launcher {ri.launcher.value!r} needs at least one process per node")
    ckpt, data = stores(ri)
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
    fabric = node_fabric(ri)
    inner = fabric_env.inner_lines(fabric) + launch_lines(ri)
    user_env = frozenset(k for k, _ in ri.env)
    fabric_host = fabric_env.host_lines(fabric, user_env=user_env)
    if ri.image:
        # ``-e NAME`` passes the host's value through without writing it on the command line.
        passed = {*(k for k, _ in orch_env), *(k for k, _ in nccl), *(k for k, _ in ri.env), *ri.secrets}
        if fabric is fabric_env.TCPX:
            passed |= set(fabric_env.TCPX_NIC_ENV)
        if ri.master_from_start:
            passed.add("ORCH_MASTER_ADDR")
        if c is not None:
            passed.add("ORCH_RESUME_PATH")
            if c.resume_via is ResumeVia.ENV:
                passed.add(c.resume_name)
        launch = docker_lines(ri, inner, sorted(passed))
    else:
        launch = inner
    text = _template().substitute(
        job_name=ri.job_name,
        node_rank=ri.node_rank,
        nodes=ri.nodes,
        launcher=ri.launcher.value,
        where=f"docker image {ri.image}" if ri.image else "on the host",
        pipefail=PIPEFAIL,
        exports=_section("orch and job environment", _exports(orch_env) + _exports(list(ri.env)) + given_master(ri)),
        secrets=_section("secrets (by name; values come from the launch environment)", secrets),
        nccl=_section(f"NCCL for {ri.interconnect.value}" + (", multi-node" if ri.is_multi_node else "")
                      + (" over InfiniBand" if ri.is_multi_node and ri.infiniband else "")
                      + (f", fabric {fabric.value}" if fabric else ""), fabric_host + _exports(nccl)),
        rclone=_section("rclone remotes (configuration only; credentials come from the environment)",
                        _exports(rclone_env(ckpt, data))),
        data=_section("data staging", data_lines(ri)),
        restore=_section("restore the latest committed checkpoint", restore_lines(ri, ckpt)),
        notify=_section("checkpoint-now notification", notify),
        launch=_section("launch", launch),
    )
    return text


def render_agent_config(ri: RenderInput) -> str:
    """The agent's JSON config (sorted keys, so deterministic). Holds no secret values."""
    ckpt, _ = stores(ri)
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
