"""Rendering a node's startup script: exact per launcher, deterministic, and the script really runs."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.manifest.schema import Manifest
from orchestrator.runtime.from_manifest import LaunchFacts, render_input_for
from orchestrator.runtime.objectstore import StoreKind, UnsupportedStoreError, parse_store
from orchestrator.runtime.render import render_agent_config, render_script
from orchestrator.runtime.render_input import (
    DataStage,
    Launcher,
    NotifyVia,
    RenderInput,
    RenderInputError,
    ResumeVia,
)


def _manifest(**over: Any) -> dict[str, Any]:
    """A job manifest (docs/manifests.md); each keyword merges into (a mapping) or replaces that section."""
    m: dict[str, Any] = {
        "apiVersion": "orch/v1", "kind": "Job", "name": "tiny",
        "resources": {"gpu": "A100-80G", "count": 2},
        "run": {"launcher": "torchrun", "script": "train.py", "args": ["--steps", "20"]},
        "checkpoint": {"path": "/ckpt", "store": "s3://store/tiny"},
    }
    for key, value in over.items():
        m[key] = {**m.get(key, {}), **value} if isinstance(value, dict) else value
    return m


def _ri(facts: LaunchFacts = LaunchFacts(), **over: Any) -> RenderInput:
    """One node's RenderInput: the manifest and the launch's facts, the way orch renders every node."""
    return render_input_for(Manifest.model_validate(_manifest(**over)), facts)


def _local_store(ri: RenderInput, uri: str) -> RenderInput:
    """The same input with its checkpoint store on this machine (file://: the renderer's test store)."""
    assert ri.checkpoint is not None
    return dataclasses.replace(ri, checkpoint=dataclasses.replace(ri.checkpoint, store_uri=uri))


def _launch_line(script: str) -> str:
    return [line for line in script.splitlines() if line.startswith("exec ")][-1]


EXPECTED_TORCHRUN = """#!/bin/sh
# orch startup script: job tiny, node 0 of 1 (torchrun, on the host).
# Rendered by orch from the job manifest; the on-node agent runs it in its own process group.
# Secrets are referenced by name only: their values come from the agent's environment, never from here.
# POSIX sh: a node may have no bash (the boot needs only sh and python3).
set -eu
if (set -o pipefail) 2>/dev/null; then set -o pipefail; fi
cd "$(dirname "$0")"
export ORCH_WORK_DIR="$PWD"
# orch and job environment
export ORCH_CHECKPOINT_DIR=/ckpt
export ORCH_CHECKPOINT_NOW_FILE=/ckpt/CHECKPOINT_NOW
export ORCH_JOB_NAME=tiny
export ORCH_MASTER_ADDR=127.0.0.1
export ORCH_MASTER_PORT=29500
export ORCH_NNODES=1
export ORCH_NODE_RANK=0
export ORCH_NPROC_PER_NODE=2
# secrets (by name; values come from the launch environment): none
# NCCL for pcie: none
# rclone remotes (configuration only; credentials come from the environment): none
# data staging: none
# restore the latest committed checkpoint
mkdir -p "$ORCH_CHECKPOINT_DIR"
ORCH_RESUME_PATH=''
orch_latest="$( (cat /store/tiny/LATEST 2>/dev/null || true) | tr -d '[:space:]')"
case "$orch_latest" in step-*[!0-9]*|step-) orch_latest="" ;; step-*) ;; *) orch_latest="" ;; esac
if [ -n "$orch_latest" ]; then
  mkdir -p "$ORCH_CHECKPOINT_DIR/$orch_latest" && cp -R /store/tiny/"$orch_latest"/. \
"$ORCH_CHECKPOINT_DIR/$orch_latest"/
  if [ ! -f "$ORCH_CHECKPOINT_DIR/$orch_latest/COMPLETE" ]; then
    echo "orch: restored checkpoint $orch_latest has no COMPLETE marker" >&2; exit 75
  fi
  ORCH_RESUME_PATH="$ORCH_CHECKPOINT_DIR/$orch_latest"
  echo "orch: resuming from $ORCH_RESUME_PATH" >&2
fi
export ORCH_RESUME_PATH
# checkpoint-now notification
rm -f "$ORCH_CHECKPOINT_NOW_FILE"
# launch
set --
if [ -n "${ORCH_RESUME_PATH:-}" ]; then set -- --resume-from "$ORCH_RESUME_PATH"; fi
exec torchrun --nnodes 1 --nproc-per-node 2 --node-rank 0 --master-addr 127.0.0.1 --master-port 29500 train.py \
--steps 20 "$@"
""".replace("\\\n", "")


def test_torchrun_script_exact() -> None:
    assert render_script(_local_store(_ri(), "file:///store/tiny")) == EXPECTED_TORCHRUN


MULTI = {"resources": {"nodes": 2, "count": 8}}
NODE_1 = LaunchFacts(node_rank=1, master_addr="10.0.0.5", master_port=29400)


@pytest.mark.parametrize(("launcher", "expected"), [
    ("torchrun", "exec torchrun --nnodes 2 --nproc-per-node 8 --node-rank 1 --master-addr 10.0.0.5 "
                 "--master-port 29400 train.py --steps 20"),
    ("accelerate", "exec accelerate launch --multi_gpu --num_machines 2 --num_processes 16 --machine_rank 1 "
                   "--main_process_ip 10.0.0.5 --main_process_port 29400 train.py --steps 20"),
    ("deepspeed", "exec deepspeed --num_nodes 2 --num_gpus 8 --master_addr 10.0.0.5 --master_port 29400 "
                  "--node_rank 1 --no_ssh --hostfile hostfile train.py --steps 20"),
])
def test_each_launcher_multi_node_rendezvous(launcher: str, expected: str) -> None:
    script = render_script(_ri(NODE_1, run={"launcher": launcher}, checkpoint=None, **MULTI))
    assert _launch_line(script) == expected
    assert "export ORCH_NODE_RANK=1" in script.splitlines()
    if launcher == "deepspeed":
        assert "printf 'node-0 slots=8\\nnode-1 slots=8\\n' > hostfile" in script.splitlines()


def test_single_node_launchers() -> None:
    acc = render_script(_ri(run={"launcher": "accelerate"}, resources={"count": 1}))
    assert _launch_line(acc) == ("exec accelerate launch --num_machines 1 --num_processes 1 --machine_rank 0 "
                                 "--main_process_ip 127.0.0.1 --main_process_port 29500 train.py --steps 20 "
                                 '"$@"')
    ds = render_script(_ri(run={"launcher": "deepspeed"}))
    assert "--no_ssh" not in ds and "hostfile" not in ds


def test_run_config_reaches_its_launcher() -> None:
    """accelerate reads its config file from ``--config_file`` (ahead of orch's flags, which override it); a
    DeepSpeed JSON goes to the script as ``--deepspeed_config``. Before, accelerate's was silently dropped."""
    acc = _launch_line(render_script(_ri(run={"launcher": "accelerate", "config": "acc cfg.yaml"})))
    assert acc.startswith("exec accelerate launch --config_file 'acc cfg.yaml' --multi_gpu --num_machines 1 ")
    ds = _launch_line(render_script(_ri(run={"launcher": "deepspeed", "config": "ds.json"})))
    assert "--config_file" not in ds and ds.endswith(" train.py --deepspeed_config ds.json --steps 20 \"$@\"")


def test_command_launcher_runs_verbatim() -> None:
    script = render_script(_ri(run={"launcher": "command", "script": None, "args": [],
                                    "command": "python a.py && python b.py"}))
    assert script.splitlines()[-1] == 'python a.py && python b.py "$@"'


def test_rendering_is_deterministic_whatever_the_mapping_order() -> None:
    a = _manifest(env={"B": "2", "A": "1", "C": "x y"}, secrets=["TOK", "HF_TOKEN"])
    b = json.loads(json.dumps(a))
    b["env"] = {"C": "x y", "A": "1", "B": "2"}
    b["secrets"] = ["HF_TOKEN", "TOK"]
    b = dict(reversed(list(b.items())))
    ra, rb = (render_input_for(Manifest.model_validate(m), LaunchFacts()) for m in (a, b))
    assert render_script(ra).encode() == render_script(rb).encode()
    assert render_agent_config(ra) == render_agent_config(rb)
    lines = render_script(ra).splitlines()
    assert lines.index("export A=1") < lines.index("export B=2") < lines.index("export C='x y'")


def test_nccl_env_follows_the_interconnect() -> None:
    nvl = render_script(_ri(resources={"interconnect": "nvlink"}))
    assert "export NCCL_P2P_LEVEL=NVL" in nvl
    pcie = render_script(_ri(resources={"interconnect": "pcie"}))
    assert "NCCL_" not in pcie  # PCIe: NCCL's own topology detection; P2P left on
    multi = render_script(_ri(resources={"interconnect": "pcie", "nodes": 2}))
    assert "export NCCL_SOCKET_IFNAME='^lo,docker'" in multi and "export NCCL_IB_DISABLE=1" in multi
    ib = render_script(dataclasses.replace(_ri(LaunchFacts(socket_ifname="ens5"), resources={"nodes": 2}),
                                           infiniband=True))
    assert "NCCL_IB_DISABLE" not in ib
    assert "export NCCL_SOCKET_IFNAME=ens5" in ib and "export GLOO_SOCKET_IFNAME=ens5" in ib
    override = render_script(_ri(resources={"interconnect": "nvlink"}, env={"NCCL_P2P_LEVEL": "PIX"}))
    assert "export NCCL_P2P_LEVEL=PIX" in override and "NCCL_P2P_LEVEL=NVL" not in override


def test_docker_vs_host() -> None:
    host = render_script(_ri())
    assert "docker" not in host
    ri = _ri(image="pytorch/pytorch:2.4.0-cuda12.4", secrets=["HF_TOKEN"], env={"A": "1"},
             setup=["pip install -r requirements.txt"], data=[{"source": "s3://data/set", "path": "/data"}],
             checkpoint={"resume": {"env": "RESUME_DIR"}})
    script = render_script(dataclasses.replace(ri, shm_size="32g"))
    launch = script[script.index("exec docker run"):]
    for part in ["--gpus all", "--ipc=host", "--shm-size=32g", "--network host",
                 '-v "$ORCH_WORK_DIR:$ORCH_WORK_DIR"', "-v /ckpt:/ckpt", "-v /data:/data", "-e HF_TOKEN",
                 "-e A", "-e RESUME_DIR", "-e ORCH_RESUME_PATH", "pytorch/pytorch:2.4.0-cuda12.4"]:
        assert part in launch, part
    # setup runs inside the container, before the launcher
    # (a failed setup line exits 78 and says so: orchestrator/engine/failure.py tells it from the command's exit)
    assert "sh -c 'set -eu\nif (set -o pipefail) 2>/dev/null; then set -o pipefail; fi\ntrap " in launch
    assert "exit 78" in launch
    assert "EXIT\npip install -r requirements.txt\ntrap - EXIT\nexec torchrun" in launch
    assert "bash" not in launch        # a container may have no bash
    assert "mkdir -p /data && rclone copy orchs3:data/set /data" in script  # staged on the host


def test_docker_with_signal_notify_is_refused() -> None:
    # The manifest refuses it first; the render input holds the same line for whatever else builds one.
    with pytest.raises(ValueError, match=r"with an image, checkpoint\.notify must be a file"):
        _ri(image="img", checkpoint={"notify": {"signal": "SIGUSR1"}})
    with pytest.raises(RenderInputError, match="notify must be 'file'"):
        dataclasses.replace(_ri(checkpoint={"notify": {"signal": "SIGUSR1"}}), image="img")


def test_signal_notify_makes_launchers_ignore_it() -> None:
    script = render_script(_ri(checkpoint={"notify": {"signal": "SIGUSR2"}}))
    assert "trap '' USR2" in script.splitlines()
    assert "export ORCH_CHECKPOINT_SIGNAL=SIGUSR2" in script


def test_secrets_are_referenced_by_name_never_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_supersecret_value")
    ri = _ri(secrets=["HF_TOKEN"])
    script, config = render_script(ri), render_agent_config(ri)
    assert '"${HF_TOKEN:?secret HF_TOKEN is not set in the launch environment}"' in script
    assert "hf_supersecret_value" not in script and "hf_supersecret_value" not in config


def test_bad_inputs_are_refused() -> None:
    """RenderInput refuses what no manifest validation can see (a launch's facts) and what it never lets
    through; the store URI is checked when rendering."""
    with pytest.raises(RenderInputError, match="node rank"):
        _ri(LaunchFacts(node_rank=3))
    good = _ri()
    with pytest.raises(RenderInputError, match="needs a script"):
        dataclasses.replace(good, script="")
    with pytest.raises(RenderInputError, match="not an environment variable name"):
        dataclasses.replace(good, env=(("BAD-NAME", "1"),))
    with pytest.raises(RenderInputError, match="interconnect"):
        dataclasses.replace(good, interconnect="infinityfabric")
    with pytest.raises(UnsupportedStoreError):
        render_script(_local_store(good, "ftp://x/y"))


def test_store_uris_map_onto_rclone() -> None:
    s3 = parse_store("s3://bucket/a/b", endpoint="http://127.0.0.1:5000")
    assert s3.kind is StoreKind.RCLONE and s3.path == "orchs3:bucket/a/b"
    assert dict(s3.env)["RCLONE_CONFIG_ORCHS3_ENDPOINT"] == "http://127.0.0.1:5000"
    assert dict(s3.env)["RCLONE_CONFIG_ORCHS3_PROVIDER"] == "Other"
    assert dict(parse_store("s3://bucket").env)["RCLONE_CONFIG_ORCHS3_PROVIDER"] == "AWS"
    gs = parse_store("gs://b/p")
    assert gs.path == "orchgcs:b/p" and dict(gs.env)["RCLONE_CONFIG_ORCHGCS_TYPE"] == "google cloud storage"
    az = parse_store("az://acct/container/p")
    assert az.path == "orchaz:container/p" and dict(az.env)["RCLONE_CONFIG_ORCHAZ_ACCOUNT"] == "acct"
    assert parse_store("file:///srv/ckpt").path == "/srv/ckpt"
    assert parse_store("/srv/ckpt").kind is StoreKind.LOCAL


# --- the rendered script, run for real (command launcher, local store) ---------------------------

PROBE = (f"{sys.executable} -c 'import json,os,sys; print(json.dumps({{\"argv\": sys.argv[1:], "
         "\"resume\": os.environ.get(\"RESUME_DIR\"), \"tok\": os.environ.get(\"TOK\"), "
         "\"data\": sorted(os.listdir(\"data\"))}))'")


def _run_rendered(tmp: Path, resume: dict[str, str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``resume``: the manifest's checkpoint.resume ({arg: ...} or {env: ...}). The stores are local paths
    (the renderer's file:// and plain-path stores, which manifests do not offer) so the script runs here."""
    (tmp / "src").mkdir(exist_ok=True)
    (tmp / "src" / "shard-0").write_text("x")
    ri = _ri(run={"launcher": "command", "script": None, "args": [], "command": PROBE}, secrets=["TOK"],
             checkpoint={"path": str(tmp / "ckpt"), "resume": resume})
    ri = dataclasses.replace(_local_store(ri, f"file://{tmp / 'store'}"), data=(DataStage(str(tmp / "src"), "data"),))
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    (work / "startup.sh").write_text(render_script(ri))
    return subprocess.run(["sh", "startup.sh"], cwd=work, capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], **env})


def _store_with_latest(tmp: Path, name: str, complete: bool = True) -> None:
    d = tmp / "store" / name
    d.mkdir(parents=True)
    (d / "model.pt").write_text("w")
    if complete:
        (d / "COMPLETE").write_text("1\n")
    (tmp / "store" / "LATEST").write_text(name + "\n")


@pytest.mark.skipif(shutil.which("sh") is None, reason="sh is needed to run the rendered script")
def test_rendered_script_restores_latest_and_passes_it_as_an_arg(tmp_path: Path) -> None:
    _store_with_latest(tmp_path, "step-6")
    out = _run_rendered(tmp_path, {"arg": "--resume-from"}, {"TOK": "s3cr3t"})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["argv"] == ["--resume-from", str(tmp_path / "ckpt" / "step-6")]
    assert got["tok"] == "s3cr3t" and got["data"] == ["shard-0"]
    assert (tmp_path / "ckpt" / "step-6" / "model.pt").read_text() == "w"


def test_rendered_script_passes_resume_by_env(tmp_path: Path) -> None:
    _store_with_latest(tmp_path, "step-2")
    out = _run_rendered(tmp_path, {"env": "RESUME_DIR"}, {"TOK": "t"})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["argv"] == [] and got["resume"] == str(tmp_path / "ckpt" / "step-2")


def test_rendered_script_fresh_start_without_latest(tmp_path: Path) -> None:
    out = _run_rendered(tmp_path, {"arg": "--resume-from"}, {"TOK": "t"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["argv"] == []


def test_rendered_script_refuses_an_incomplete_restore_and_a_missing_secret(tmp_path: Path) -> None:
    out = _run_rendered(tmp_path, {"arg": "--resume-from"}, {})
    assert out.returncode != 0 and "secret TOK is not set" in out.stderr
    _store_with_latest(tmp_path, "step-3", complete=False)
    out = _run_rendered(tmp_path, {"arg": "--resume-from"}, {"TOK": "t"})
    assert out.returncode == 75 and "no COMPLETE marker" in out.stderr


@pytest.mark.parametrize(("rc", "started"), [(0, True), (3, True), (4, True), (1, False), (7, False)])
def test_a_latest_the_store_cannot_be_asked_for_stops_the_node(tmp_path: Path, rc: int, started: bool) -> None:
    """rclone says "no LATEST" with exit 0 (empty) or 3/4 (not found): a first start. Any other failure, asked
    twice, stops the node (exit 75) with rclone's words in the log. Before, it was taken for "no LATEST": the
    job started over from scratch beside a store holding its progress."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rclone").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls"}\n'
                                    f'echo "rclone: the store said no" >&2; exit {rc}\n')
    (bin_dir / "rclone").chmod(0o755)
    ri = _ri(run={"launcher": "command", "script": None, "args": [], "command": "echo job-ran"},
             checkpoint={"path": str(tmp_path / "ckpt")})
    work = tmp_path / "work"
    work.mkdir()
    (work / "startup.sh").write_text(render_script(ri))
    out = subprocess.run(["sh", "startup.sh"], cwd=work, capture_output=True, text=True, timeout=60,
                         env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    calls = (tmp_path / "calls").read_text().splitlines()
    if started:
        assert out.returncode == 0 and "job-ran" in out.stdout and len(calls) == 1, out.stderr
    else:
        assert out.returncode == 75 and "job-ran" not in out.stdout
        assert calls == ["cat orchs3:store/tiny/LATEST"] * 2
        assert f"cannot read the store's LATEST (rclone exited {rc})" in out.stderr
        assert "rclone: the store said no" in out.stderr


@pytest.mark.parametrize("latest", ["step-1/../../etc", "step-", "step-1x", "steps-1", "x step-1", "*"])
def test_latest_that_is_not_a_checkpoint_name_is_ignored(tmp_path: Path, latest: str) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "LATEST").write_text(latest + "\n")
    out = _run_rendered(tmp_path, {"arg": "--resume-from"}, {"TOK": "t"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["argv"] == []


# --- orch render ---------------------------------------------------------------------------------

def test_orch_render_cli_on_a_real_manifest(tmp_path: Path) -> None:
    from orchestrator.cli.main import app

    path = tmp_path / "job.yaml"
    path.write_text(
        "apiVersion: orch/v1\nkind: Job\nname: tiny\n"
        "resources: {gpu: L4, count: 2, nodes: 2}\n"
        "run: {launcher: torchrun, script: train.py, args: ['--steps', 20]}\n"
        "checkpoint: {path: /ckpt, store: 's3://bucket/tiny', resume: {env: RESUME_FROM}}\n"
        "secrets: [HF_TOKEN]\n")
    runner = CliRunner()
    out = runner.invoke(app, ["render", str(path), "--part", "script", "--node-rank", "1", "--master-addr", "10.1.2.3"])
    assert out.exit_code == 0, out.output
    script = out.stdout
    assert "torchrun --nnodes 2 --nproc-per-node 2 --node-rank 1 --master-addr 10.1.2.3" in script
    assert "export RESUME_FROM" in script or "RESUME_FROM=" in script
    assert "HF_TOKEN" in script and "rclone cat orchs3:bucket/tiny/LATEST" in script
    both = runner.invoke(app, ["render", str(path)])
    assert both.exit_code == 0 and "# ===== agent.json =====" in both.stdout
    bad = runner.invoke(app, ["render", str(path), "--node-rank", "5"])
    assert bad.exit_code == 2 and "--node-rank 5 is outside 0..1" in bad.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: orch/v1\nkind: Job\nname: tiny\nresources: {gpu: A100-90G}\n"
                      "run: {launcher: torchrun, script: t.py}\n")
    out = runner.invoke(app, ["render", str(broken)])
    assert out.exit_code == 2 and "did you mean A100-80G" in out.output


def test_render_takes_the_job_of_a_file_of_several_with_job_as_rehearse_does(tmp_path: Path) -> None:
    """A file of several jobs: --job picks one (render refused such a file); no --job, or a name the file does
    not hold, is refused the same way by render and rehearse, with the close name where there is one."""
    from orchestrator.cli.main import app

    path = tmp_path / "jobs.yaml"
    path.write_text("\n---\n".join(
        f"apiVersion: orch/v1\nkind: Job\nname: {name}\nresources: {{gpu: L4}}\n"
        f"run: {{launcher: command, command: echo {name}-says-hi}}\n" for name in ("train-small", "train-large")))
    runner = CliRunner()
    out = runner.invoke(app, ["render", str(path), "--job", "train-large", "--part", "script"])
    assert out.exit_code == 0 and "train-large-says-hi" in out.stdout and "train-small" not in out.stdout, out.output
    for command in ("render", "rehearse"):
        out = runner.invoke(app, [command, str(path)])
        assert (out.exit_code, out.stderr) == (2, f"error: {path} holds train-small, train-large: pick one with "
                                                  "--job\n"), (command, out.output)
        out = runner.invoke(app, [command, str(path), "--job", "train-lage"])
        assert (out.exit_code, out.stderr) == (2, f"error: no job 'train-lage' in {path}; did you mean "
                                                  "'train-large'? (it holds train-small, train-large)\n"), out.output
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    out = runner.invoke(app, ["render", str(empty)])
    assert (out.exit_code, out.stderr) == (2, f"error: {empty} holds no job (apiVersion: orch/v1, kind: Job, ...): "
                                              "nothing to render\n")


def test_render_input_is_frozen() -> None:
    ri = _ri()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ri.nodes = 3  # type: ignore[misc]
    assert ri.launcher is Launcher.TORCHRUN and ri.checkpoint is not None
    assert ri.checkpoint.resume_via is ResumeVia.ARG and ri.checkpoint.notify_via is NotifyVia.FILE


def test_a_bad_manifest_is_reported_by_render_as_by_validate(tmp_path: Path) -> None:
    """render said "error: job.yaml:7:7: ..." (one line of str(ManifestError)); validate, plan and apply say each
    problem as ``path:line:col: field: what (hint)``."""
    from orchestrator.cli.main import app

    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: orch/v1\nkind: Job\nname: Bad_Name\nresources: {gpu: NOPE}\n"
                   "run: {launcher: command, command: x}\n")
    runner = CliRunner()
    validated, rendered = runner.invoke(app, ["validate", str(job)]), runner.invoke(app, ["render", str(job)])
    assert validated.exit_code == rendered.exit_code == 2
    assert rendered.stderr == validated.stderr and rendered.stderr.startswith(f"{job}:3:")
    assert len(rendered.stderr.splitlines()) == 2


# --- data over HTTP(S) and the shipped examples ----------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_example_validates_and_renders_on_every_node(example: Path) -> None:
    from orchestrator.cli.main import app
    from orchestrator.manifest import load_manifests

    [loaded] = load_manifests([example])
    runner = CliRunner()
    assert runner.invoke(app, ["validate", str(example)]).exit_code == 0
    for rank in range(loaded.manifest.resources.nodes):
        out = runner.invoke(app, ["render", str(example), "--node-rank", str(rank)])
        assert out.exit_code == 0, out.output
        assert "# ===== agent.json =====" in out.stdout


class _Files:
    """A tiny HTTP server on 127.0.0.1: GET /<name> answers its bytes; the first ``flaky`` GETs answer 503."""

    def __init__(self, files: dict[str, bytes], flaky: int = 0) -> None:
        import http.server
        import threading

        outer = self
        self.flaky, self.gets = flaky, 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.gets += 1
                body = files.get(self.path.lstrip("/"))
                if outer.flaky > 0:
                    outer.flaky -= 1
                    self.send_error(503)
                elif body is None:
                    self.send_error(404)
                else:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


LIST_DATA = f"{sys.executable} -c 'import os; print(sorted(os.listdir(\"data\")))'"


def _run_with_url_data(tmp: Path, data: list[dict[str, str]], path: str) -> subprocess.CompletedProcess[str]:
    """``data``'s sources are this test's plain-http server (manifests take https://): staged as given."""
    ri = _ri(run={"launcher": "command", "script": None, "args": [], "command": LIST_DATA}, checkpoint=None)
    ri = dataclasses.replace(ri, data=tuple(DataStage(d["source"], d["path"]) for d in data))
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    (work / "startup.sh").write_text(render_script(ri))
    return subprocess.run(["sh", "startup.sh"], cwd=work, capture_output=True, text=True, timeout=120,
                          env={"PATH": path})


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is needed on the node for URL data")
def test_url_data_is_downloaded_with_retries_into_its_path(tmp_path: Path) -> None:
    files = _Files({"set.tar.gz": b"tarball", "labels.txt": b"a,b"}, flaky=1)
    try:
        out = _run_with_url_data(tmp_path, [{"source": f"{files.url}/set.tar.gz", "path": "data/"},
                                            {"source": f"{files.url}/labels.txt", "path": "data/y.csv"}],
                                 os.environ["PATH"])
    finally:
        files.close()
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['set.tar.gz', 'y.csv']"
    assert (tmp_path / "work" / "data" / "set.tar.gz").read_bytes() == b"tarball"
    assert (tmp_path / "work" / "data" / "y.csv").read_bytes() == b"a,b"
    assert files.gets == 3                                    # the 503 was retried


def test_a_failed_download_stops_the_script_and_leaves_no_file(tmp_path: Path) -> None:
    files = _Files({})
    try:
        out = _run_with_url_data(tmp_path, [{"source": f"{files.url}/missing.bin", "path": "data/x.bin"}],
                                 os.environ["PATH"])
    finally:
        files.close()
    assert out.returncode != 0
    assert not (tmp_path / "work" / "data" / "x.bin").exists()


def test_without_curl_or_wget_python_downloads(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "dirname", "mkdir", "mv"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to(sys.executable)
    files = _Files({"w.bin": b"weights"})
    try:
        out = _run_with_url_data(tmp_path, [{"source": f"{files.url}/w.bin", "path": "data/"}], str(bin_dir))
    finally:
        files.close()
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "work" / "data" / "w.bin").read_bytes() == b"weights"


def test_url_data_renders_as_quoted_downloads_and_stores_as_copies() -> None:
    script = render_script(dataclasses.replace(_ri(), data=(DataStage("https://h.example/a b.tgz?sig=1&x=2", "/d/"),
                                                            DataStage("s3://bucket/set", "/s"))))
    assert "orch_fetch 'https://h.example/a b.tgz?sig=1&x=2' '/d/a b.tgz'" in script
    assert "rclone copy orchs3:bucket/set /s" in script
    assert "orch_fetch" not in render_script(_ri())           # the helper only where a URL is staged
