"""Fake clouds that boot their nodes: a launch on a fake cloud runs the machine's user data as a local process.

``NodeBooter.sync()`` is the clouds' side of a tick: every instance a fake cloud lists as running that has not
booted yet gets its own directory, and its user data (read back through the cloud's own API: EC2
DescribeInstanceAttribute userData from moto, the GCE fake's startup-script metadata item) runs there as
``sh boot.sh`` with a clean environment (no credentials: whatever the node needs must come through its boot
script), ``$ORCH_ROOT`` set to that directory, and the node's tools on PATH (a ``torchrun`` of this interpreter,
a stand-in ``nvidia-smi``). Every process a node starts carries ``ORCH_FAKE_NODE=<dir>`` in its environment, so
an instance the cloud no longer lists as running (terminated, reclaimed) has its whole process tree killed, as a
real machine going away would. Nothing here opens a socket to the node: it reports through the store.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from providers.base import Instance, InstanceState, Provider

MARK = "ORCH_FAKE_NODE"

#: The stand-in nvidia-smi: two GPUs at fixed utilization, in the CSV shape the agent queries.
NVIDIA_SMI = """#!/bin/sh
echo "0, {u0}, 1000, 81920, 300.5"
echo "1, {u1}, 1000, 81920, 290.1"
"""


@dataclass
class BootedNode:
    provider: str
    instance_id: str
    root: Path
    boot_exit: int
    booted_at: float

    @property
    def work(self) -> Path:
        return self.root / ".orch" / "jobs"


@dataclass
class NodeBooter:
    """Boots the fake clouds' instances. ``user_data``: per provider, how to read an instance's user data
    through that cloud's API. ``gpu_util``: per provider, the utilization its stand-in nvidia-smi reports."""

    root: Path
    providers: Mapping[str, Provider]
    owner: str
    user_data: Mapping[str, Callable[[Instance], str]]
    gpu_util: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    nodes: dict[str, BootedNode] = field(default_factory=dict)
    killed: list[str] = field(default_factory=list)

    def sync(self) -> None:
        for name, provider in self.providers.items():
            # One listing per cloud and sync (each is a request to a fake cloud served in this process): what it
            # says running boots, what it says otherwise or no longer lists is killed.
            instances = provider.list_instances(self.owner)
            for inst in instances:
                key = f"{name}/{inst.instance_id}"
                if inst.state is InstanceState.RUNNING and key not in self.nodes:
                    self.nodes[key] = self._boot(name, inst)
                elif inst.state is not InstanceState.RUNNING and key in self.nodes and key not in self.killed:
                    self.kill(key)
            listed = {f"{name}/{i.instance_id}" for i in instances}
            for key in [k for k in self.nodes if k.startswith(f"{name}/") and k not in listed]:
                if key not in self.killed:
                    self.kill(key)

    def _boot(self, provider: str, inst: Instance) -> BootedNode:
        root = self.root / f"{provider}-{inst.instance_id.replace('/', '-')}"
        (root / "bin").mkdir(parents=True)
        script = self.user_data[provider](inst)
        (root / "boot.sh").write_text(script)
        torchrun = root / "bin" / "torchrun"
        torchrun.write_text(f'#!/bin/sh\nexec {sys.executable} -m torch.distributed.run "$@"\n')
        u0, u1 = self.gpu_util.get(provider, (0, 0))
        smi = root / "bin" / "nvidia-smi"
        smi.write_text(NVIDIA_SMI.format(u0=u0, u1=u1))
        for tool in (torchrun, smi):
            tool.chmod(0o755)
        env = {"PATH": f"{root / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(root), "ORCH_ROOT": str(root),
               "LANG": "C.UTF-8", MARK: str(root)}
        done = subprocess.run(["sh", "boot.sh"], cwd=root, env=env, capture_output=True, timeout=120)
        (root / "boot.log").write_bytes(done.stdout + done.stderr)
        return BootedNode(provider, inst.instance_id, root, done.returncode, time.monotonic())

    def kill(self, key: str) -> int:
        """SIGKILL every process of the node (the machine is gone); returns how many."""
        node = self.nodes[key]
        self.killed.append(key)
        victims = node_processes(node.root)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in victims:
            _reap(pid)
        return len(victims)

    def close(self) -> None:
        for key in list(self.nodes):
            if key not in self.killed:
                self.kill(key)


def node_processes(root: Path) -> list[int]:
    return processes_marked(MARK, str(root))


def processes_marked(name: str, value: str) -> list[int]:
    """Pids (not this process) whose environment holds ``name=value``: everything a fake machine started."""
    mark = f"{name}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if mark in environ.split(b"\0"):
            found.append(int(entry))
    return found


def _reap(pid: int) -> None:
    """Wait until ``pid`` is gone or a zombie (the kernel delivers SIGKILL promptly; this is not a timer)."""
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        if stat[stat.rfind(")") + 2:].split()[0] in ("Z", "X"):
            return
        time.sleep(0.01)


# --- reading user data back through each fake cloud's API ------------------------------------------

def aws_user_data(endpoint: str, region: str) -> Callable[[Instance], str]:
    import boto3

    ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name=region, aws_access_key_id="testing",
                       aws_secret_access_key="testing")

    def read(inst: Instance) -> str:
        ec2_id = inst.instance_id.partition("/")[2] or inst.instance_id
        attr = ec2.describe_instance_attribute(InstanceId=ec2_id, Attribute="userData")
        value = attr.get("UserData", {}).get("Value", "")
        raw = base64.b64decode(value) if value else b""
        # cloud-init takes gzip'd user data and runs what it unpacks (EC2's 16 KB is counted before unpacking).
        return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()

    return read


def gce_user_data(fake) -> Callable[[Instance], str]:  # type: ignore[no-untyped-def]
    def read(inst: Instance) -> str:
        zone, _, name = inst.instance_id.partition("/")
        body = fake.instance(zone, name) or {}
        items = body.get("metadata", {}).get("items", [])
        return next((i["value"] for i in items if i.get("key") == "startup-script"), "")

    return read
