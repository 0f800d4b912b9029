"""The startup script's launch section: the launcher's command line (torchrun, accelerate, deepspeed or the
manifest's command), setup lines with their own exit code, and the docker wrapper around them. Pure and
deterministic (every operand quoted with ``shlex.quote``); render.py puts the section into the script."""

from __future__ import annotations

import shlex

from orchestrator.engine.failure import SETUP_FAILED_EXIT
from orchestrator.runtime import fabric_env
from orchestrator.runtime.render_input import Launcher, RenderInput, ResumeVia
from providers.fabric import Fabric

__all__ = ["PIPEFAIL", "docker_lines", "given_master", "launch_lines", "launcher_argv", "node_fabric"]

_Q = shlex.quote

#: pipefail where the shell has it (bash, busybox, dash >= 0.5.12); POSIX sh before 2024 does not.
PIPEFAIL = "if (set -o pipefail) 2>/dev/null; then set -o pipefail; fi"

#: Stands for node 0's address in a launcher line when it comes from orch's start.json (``master_from_start``).
_GIVEN_MASTER = "@ORCH_MASTER_ADDR@"


def launcher_argv(ri: RenderInput) -> list[str]:
    a = _GIVEN_MASTER if ri.master_from_start else ri.master_addr
    n, g, r, p = ri.nodes, ri.gpus_per_node, ri.node_rank, str(ri.master_port)
    if ri.launcher is Launcher.TORCHRUN:
        head = ["torchrun", "--nnodes", str(n), "--nproc-per-node", str(g), "--node-rank", str(r),
                "--master-addr", a, "--master-port", p]
    elif ri.launcher is Launcher.ACCELERATE:
        # The config file first: the flags after it (orch's world shape) override what it says.
        head = ["accelerate", "launch", *(["--config_file", ri.accelerate_config] if ri.accelerate_config else []),
                *(["--multi_gpu"] if n * g > 1 else []), "--num_machines", str(n),
                "--num_processes", str(n * g), "--machine_rank", str(r), "--main_process_ip", a,
                "--main_process_port", p]
    else:
        head = ["deepspeed", "--num_nodes", str(n), "--num_gpus", str(g), "--master_addr", a, "--master_port", p,
                "--node_rank", str(r)]
        if ri.is_multi_node:
            # Each node launches its own ranks (no pdsh/ssh fan-out); the hostfile only states world shape.
            head += ["--no_ssh", "--hostfile", "hostfile"]
    return [*head, ri.script, *ri.args]


def launch_lines(ri: RenderInput) -> list[str]:
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
        line = "exec " + " ".join(_Q(x) for x in launcher_argv(ri)) + tail
        lines.append(line.replace(_GIVEN_MASTER, '"$ORCH_MASTER_ADDR"'))
    return lines


def given_master(ri: RenderInput) -> list[str]:
    if not ri.master_from_start:
        return []
    return ['export ORCH_MASTER_ADDR="${ORCH_MASTER_ADDR_GIVEN:?orch gave no master address (start.json)}"']


def node_fabric(ri: RenderInput) -> Fabric | None:
    """The fabric the startup script prepares: only a multi-node job's (one node talks to no peer)."""
    return ri.fabric if ri.is_multi_node else None


def docker_lines(ri: RenderInput, inner: list[str], passed_env: list[str]) -> list[str]:
    mounts = ['"$ORCH_WORK_DIR:$ORCH_WORK_DIR"']
    extra = sorted({p for p in [*(d.path for d in ri.data), *([ri.checkpoint.local_dir] if ri.checkpoint else [])]
                    if p.startswith("/")})
    mounts += [_Q(f"{p}:{p}") for p in extra]
    argv = ["exec docker run --rm", f"--name {_Q('orch-' + ri.job_name)}", "--gpus all", "--ipc=host",
            f"--shm-size={_Q(ri.shm_size)}", "--network host", *fabric_env.docker_args(node_fabric(ri)),
            *(f"-v {m}" for m in mounts),
            '-w "$ORCH_WORK_DIR"', *(f"-e {name}" for name in passed_env), _Q(ri.image),
            "sh -c " + _Q("\n".join(["set -eu", PIPEFAIL, *inner]))]
    return [" \\\n  ".join(argv)]
