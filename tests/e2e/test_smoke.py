"""``orch smoke --yes`` against every fake cloud: each node really boots orch's script and its agent reports.

The fake clouds (moto's EC2 for AWS, tests/fakes for GCE, Azure ARM, RunPod, Vast.ai and Lambda) accept the
launches ``orch smoke`` makes through the real adapters; a ``NodeBooter`` (tests/e2e/booting.py) plays each
cloud's machine: every instance its cloud lists as running gets its own directory, and what that cloud would run
at boot (read back through the fake: EC2 userData, GCE startup-script, Azure customData, RunPod's container
command with its env, Vast's onstart, Lambda's user_data) runs there as a local process, which installs the agent,
and the agent reports to the state store (moto S3). So "first report" is the agent's own status object, read by
the engine's store monitor. Terminated instances have their processes killed, as a machine going away would.

The booter runs in a thread that syncs with the clouds while the CLI runs in this process; it is a poller of
the clouds' state, no timer decides anything (the CLI's --timeout only bounds a hung run). The SSH provider's host
is a real sshd (tests/support/sshd.py), the user's own machine: smoke reserves it, starts the agent over SSH with
the engine's bootstrapper, hears it through the engine's monitor, and the provider's stop leaves no process.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shlex
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from providers.base import Instance, Provider
from tests.e2e.booting import NodeBooter, aws_user_data, gce_user_data
from tests.e2e.conftest import host_settings, machine_processes, require_tools, ssh_settings
from tests.support.sshd import FakeGpu, Sshd

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

# An owner of its own: moto keeps one EC2 world per process, so machines other tests of this xdist worker left
# there (owner "tester", job "contract-job") must not count as smoke's leftovers.
OWNER = f"smoke{uuid.uuid4().hex[:8]}"
CLOUDS = ("aws", "gcp", "azure", "runpod", "vastai", "lambda")
#: The small CPU machine smoke boots where the provider rents one (orchestrator/app/smoke.py CPU_TYPES); the
#: others (GPU-only clouds, and RunPod's GPU-pod adapter) get their cheapest GPU offer.
CPU = {"aws": "m5.large", "gcp": "e2-standard-2", "azure": "Standard_D2s_v5"}


@dataclass
class World:
    config: Path
    booter: NodeBooter
    providers: dict[str, Provider]
    store: Any            # boto3 S3 client on moto
    bucket: str
    fakes: Any            # tests._jobs_clouds.FakeClouds
    aws: Any              # tests.fakes.aws.FakeAws
    machine: Sshd         # the user's own machine of the SSH provider


def _azure_user_data(arm: Any) -> Callable[[Instance], str]:
    def read(inst: Instance) -> str:
        with arm.lock:
            vm = next(v for (_, name), v in arm.state.vms.items() if name == inst.instance_id)
        data = vm["properties"]["osProfile"].get("customData") or ""
        return base64.b64decode(data).decode() if data else ""
    return read


def _exports(env: dict[str, str]) -> str:
    """``export`` lines for a container's environment (Vast's env also carries docker options: skipped)."""
    return "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in env.items() if k.isidentifier())


def _runpod_user_data(fake: Any) -> Callable[[Instance], str]:
    """The pod's container command (dockerArgs) with its env, as the pod's container starts. The command is
    the container's main process, which never exits (the image's entrypoint): here it runs in the background,
    its output to the node's container.log (the booter waits for boot.sh's output to close)."""
    def read(inst: Instance) -> str:
        pod = fake.pods[inst.instance_id]
        env = _exports({e["key"]: e["value"] for e in pod.inputs.get("env") or []})
        return env + f"( {pod.inputs.get('dockerArgs') or 'true'} ) > container.log 2>&1 &\n"
    return read


def _vast_user_data(fake: Any) -> Callable[[Instance], str]:
    """Vast runs onstart as root in the container, with the create request's env, and root's home is /root:
    here, the node's own directory, which is the boot's working directory (so ``/root/x`` becomes ``x``, which
    also holds inside quotes, where ``$HOME`` would not). The fake keeps no env on the instance: the create
    request has it."""
    def read(inst: Instance) -> str:
        with fake.lock:
            row = fake.state.instances[int(inst.instance_id)]
            body = next((r.body for r in reversed(fake.state.requests) if isinstance(r.body, dict)
                         and r.body.get("label") == row["label"] and "onstart" in r.body), {})
        return _exports(body.get("env") or {}) + (row.get("onstart") or "").replace("/root/", "")
    return read


def _lambda_user_data(fake: Any) -> Callable[[Instance], str]:
    """Lambda's fake keeps no user_data on the instance: the launch request that named it does."""
    def read(inst: Instance) -> str:
        name = fake.instances[inst.instance_id].name
        body = next(r.body for r in fake.requests if r.method == "POST" and isinstance(r.body, dict)
                    and r.body.get("name") == name)
        return str(body.get("user_data") or "")
    return read


def _public_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = Ed25519PrivateKey.generate().public_key()
    return public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode() + " smoke"


@pytest.fixture
def world(tmp_path: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    require_tools()
    import boto3

    from providers.registry import create_provider, load_settings
    from tests._jobs_clouds import start_clouds
    from tests.fakes.aws import FakeAws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", f"smoke-{uuid.uuid4().hex}")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)   # rclone refuses an S3 endpoint with it set
    monkeypatch.delenv("ORCH_STATE_STORE", raising=False)
    with contextlib.ExitStack() as stack:
        fakes = start_clouds()
        stack.callback(fakes.close)
        aws = FakeAws()
        stack.callback(aws.close)
        machine = stack.enter_context(Sshd(tmp_path / "own-machine", gpus=(FakeGpu(0, utilization=5),)))
        own = ssh_settings((host_settings("own-1", machine, 0.5, "home", gpus=1),), machine, tmp_path)
        sections = fakes.sections() | {"ssh": own.model_dump(mode="json", exclude_none=True)} | {"aws": {
            "regions": ["us-east-1"], "endpoint_url": aws.endpoint_url, "ami_owners": ["099720109477"],
            "ami_name_pattern": "ubuntu/images/hvm-ssd/ubuntu-*-amd64-server-*", "retry_deadline_s": 5.0}}
        s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
        bucket = f"orch-smoke-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        config = tmp_path / "orch.yaml"
        # JSON is YAML 1.2 with every string quoted: a YAML 1.1 dumper leaves the AMI owner 099720109477 bare,
        # which orch's 1.2 reader refuses as ambiguous (1.1 text, 1.2 a number that loses its leading zero).
        config.write_text(json.dumps({"owner": OWNER, "providers": sections, "daemon": {
            "state_store": f"s3://{bucket}/state", "store_endpoint": s3_endpoint}}))
        for key, value in fakes.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("ORCH_SSH_PUBLIC_KEY", _public_key())   # EC2 (moto) checks the key's format
        monkeypatch.setenv("ORCH_CONFIG", str(config))
        monkeypatch.setenv("ORCH_DATABASE_URL", f"sqlite:///{tmp_path / 'unused.db'}")
        providers = fakes.providers() | {"aws": create_provider("aws", load_settings("aws", sections["aws"]))}
        own_provider = create_provider("ssh", load_settings("ssh", sections["ssh"]))
        for p in providers.values():
            stack.callback(getattr(p, "close", lambda: None))
        readers = {"aws": aws_user_data(aws.endpoint_url, "us-east-1"), "gcp": gce_user_data(fakes.gce.fake),
                   "azure": _azure_user_data(fakes.arm), "runpod": _runpod_user_data(fakes.runpod),
                   "vastai": _vast_user_data(fakes.vast), "lambda": _lambda_user_data(fakes.lambda_fake)}
        booter = NodeBooter(tmp_path / "nodes", providers, OWNER, readers)
        stack.callback(booter.close)
        stack.callback(getattr(own_provider, "close", lambda: None))
        yield World(config, booter, providers | {"ssh": own_provider}, s3, bucket, fakes, aws, machine)


@contextlib.contextmanager
def clouds_booting(booter: NodeBooter) -> Iterator[None]:
    """The clouds' side, in a thread: boot what became running, kill what went away, until told to stop."""
    stop, failures = threading.Event(), []

    def loop() -> None:
        while not stop.is_set():
            try:
                booter.sync()
            except Exception as exc:  # surfaced in the test, never swallowed
                failures.append(exc)
                return
            stop.wait(0.05)

    thread = threading.Thread(target=loop, name="fake-clouds-boot", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        booter.sync()           # the last word: machines the CLI terminated are killed
        assert not failures, failures


def _cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    return CliRunner().invoke(app, ["smoke", *args])


def test_smoke_without_yes_launches_nothing_and_names_the_cost(world: World) -> None:
    shown = _cli("--json")
    assert shown.exit_code == 2, shown.output
    plan = json.loads(shown.stdout)
    assert plan["launched"] is False
    by = {t["provider"]: t for t in plan["targets"]}
    assert set(by) == {*CLOUDS, "ssh"}
    assert (by["ssh"]["instance_type"], by["ssh"]["kind"]) == ("own-1", "gpu")
    assert by["ssh"]["note"].startswith("your own machine: nothing launched"), by["ssh"]
    assert all(by[c]["instance_type"] and by[c]["max_cost_usd"] > 0 for c in CLOUDS)
    assert {c: (by[c]["instance_type"], by[c]["kind"], by[c]["gpus"]) for c in CPU} == {
        c: (t, "cpu", 0) for c, t in CPU.items()}
    for cloud in set(CLOUDS) - set(CPU):
        t = by[cloud]
        assert t["kind"] == "gpu" and t["gpus"] >= 1 and t["note"].startswith("GPU: "), t
    assert plan["max_cost_usd"] == pytest.approx(sum(t["max_cost_usd"] for t in plan["targets"]))
    listed = {c: [i for i in p.list_instances(OWNER)] for c, p in world.providers.items()}
    assert listed == {c: [] for c in (*CLOUDS, "ssh")}


def test_smoke_yes_boots_every_fake_cloud_hears_its_agent_and_leaves_nothing(world: World) -> None:
    with clouds_booting(world.booter):
        done = _cli("--yes", "--json", "--poll", "0.1", "--timeout", "60", "--teardown-timeout", "60")
    print(done.stderr)
    results = {r["provider"]: r for r in json.loads(done.stdout)["results"]}
    assert set(results) == {*CLOUDS, "ssh"}, done.output
    for cloud in (*CLOUDS, "ssh"):
        r = results[cloud]
        assert r["launched"] and r["error"] is None, (cloud, r)
        assert r["first_report_s"] is not None and r["first_report_s"] > 0, (cloud, r)
        assert r["leftovers"] == [] and r["result"] == "ok", (cloud, r)
        assert 0 < r["cost_usd"] < r["price_hr"], (cloud, r)
        assert (r["instance_type"], r["kind"]) == ((CPU[cloud], "cpu") if cloud in CPU else (r["instance_type"], "gpu"))
    # The own machine: reserved, the agent started over SSH and heard, then every process of the launch ended.
    assert results["ssh"]["instance_id"] == "own-1" and machine_processes(world.machine) == []
    # The GCE machine went out with no GPU: no accelerators and no request to install the NVIDIA driver.
    [insert] = [q.body for q in world.fakes.gce.fake.requests if q.method == "POST" and q.path.endswith("/instances")]
    assert insert["machineType"].endswith("/machineTypes/e2-standard-2") and not insert.get("guestAccelerators")
    assert "install-nvidia-driver" not in {i["key"] for i in insert["metadata"]["items"]}
    assert done.exit_code == 0, done.output
    # The report was the agent's own: a status object in the store under each launch id, written by a node
    # this test booted from what the cloud was given.
    keys = [o["Key"] for o in world.store.list_objects_v2(Bucket=world.bucket, Prefix="state/")["Contents"]]
    for cloud in CLOUDS:
        launch = results[cloud]["launch_id"]
        assert any(k.endswith(f"/{launch}/status.json") for k in keys), (cloud, launch, keys)
        [node] = [n for k, n in world.booter.nodes.items() if k.startswith(f"{cloud}/")]
        assert (node.root / "boot.log").exists()
    # Nothing left, as the clouds themselves say (not only as the adapters list it): every node's processes
    # are gone, no instance is live, no network resource remains.
    assert sorted(world.booter.killed) == sorted(world.booter.nodes)
    assert world.fakes.raw_counts() == dict.fromkeys(("vastai", "lambda", "runpod", "gcp", "azure"), 0)
    for cloud, provider in world.providers.items():
        assert [i for i in provider.list_instances(OWNER) if not i.state.is_gone] == [], cloud
        assert provider.list_network_resources(OWNER) == [], cloud
    with world.fakes.arm.lock:
        assert not world.fakes.arm.state.nics and not world.fakes.arm.state.pips and not world.fakes.arm.state.disks
    lines = [f"{c}: first report {results[c]['first_report_s']:.1f}s, held {results[c]['held_s']:.1f}s"
             for c in (*CLOUDS, "ssh")]
    print("\n[orch smoke on the fakes] " + "; ".join(lines))
