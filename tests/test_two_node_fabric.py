"""The must-hold of issue 30 for multi-node: the 2-node example (examples/torchrun-ddp.yaml) launched on the AWS,
GCP and Azure fakes, on an instance type with a fabric (EFA, GPUDirect-TCPX, InfiniBand) and on one without:

* both nodes sit in one placement group (AWS cluster group, GCP compact policy, Azure proximity group);
* the group's rule lets them talk, evaluated by the fake where it can (GCE firewall, Azure NSG) and by the
  security group's own rule on AWS (moto stores rules but does not filter traffic), and nothing outside the
  cloud's network reaches them (no rule admits 0.0.0.0/0 unless configured);
* the launch carries the fabric's interfaces (EFA interfaces, the TCPX GPU NICs, the IB availability set and
  HPC image), and the node reads back on that fabric;
* the NCCL environment rendered for the node matches that fabric, and is plain TCP where there is none, which
  ``orch plan`` warns about.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from providers.base import Instance, LaunchSpec, Market, Offer, new_launch_id
from providers.fabric import Fabric, attached_fabric, fabric_note

GANG = "j7-g0"
EXAMPLE = Path(__file__).parent.parent / "examples" / "torchrun-ddp.yaml"
RENDEZVOUS, NCCL_PORT, SSH = 29500, 43117, 22
OUTSIDE = "203.0.113.7"


@dataclass
class Launched:
    """What a cloud's fake says about a 2-node gang after its launch."""

    nodes: list[Instance]
    in_one_group: bool
    talk: Callable[[int, int, int], bool]       # (from node, to node, port) -> admitted
    from_outside: Callable[[int, int], bool]    # (to node, port) -> admitted from OUTSIDE
    carried: dict[str, Any] = field(default_factory=dict)   # what the launch gave each node for the fabric


# --- AWS (moto + the placement fake) -----------------------------------------------------------------------

def _aws(instance_type: str) -> Launched:
    from providers.aws.adapter import AwsProvider
    from providers.aws.placement import group_name
    from tests.contract.harness_aws import catalog_offer
    from tests.test_aws_adapter import OWNER, _ec2, _group, _session, _settings

    fake = _AWS_FAKE
    fake.reset()
    p = AwsProvider(_settings(fake), session=_session())
    offer = replace(catalog_offer(Market.ON_DEMAND), instance_type=instance_type)
    nodes, sent = [], []
    for rank in (0, 1):
        nodes.append(p.launch(_spec(offer, OWNER, rank)))
        sent.append(dict(fake.sent["RunInstances"]))
    p.close()
    ids = [n.instance_id.split("/")[1] for n in nodes]
    group = fake.placement.group(group_name(OWNER, GANG))
    sg = _group(fake)
    assert sg is not None
    described = [i for r in _ec2(fake).describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]]
    # An instance's groups: EC2 lists the primary interface's at the instance too; moto only on the interface.
    member_groups = [{g["GroupId"] for g in i["SecurityGroups"]}
                     | {g["GroupId"] for n in i.get("NetworkInterfaces", []) for g in n.get("Groups", [])}
                     for i in described]

    def admitted(source_groups: set[str], source_ip: str, port: int) -> bool:
        """EC2's ingress evaluation of orch's group: a permission admits by source group or source range."""
        for perm in sg["IpPermissions"]:
            lo, hi = perm.get("FromPort", 0), perm.get("ToPort", 65535)
            if perm["IpProtocol"] not in ("-1", "tcp") or (perm["IpProtocol"] == "tcp" and not lo <= port <= hi):
                continue
            if {pair["GroupId"] for pair in perm.get("UserIdGroupPairs", [])} & source_groups:
                return True
            if any(ipaddress.ip_address(source_ip) in ipaddress.ip_network(r["CidrIp"])
                   for r in perm.get("IpRanges", [])):
                return True
        return False

    cards = [sorted(v for k, v in s.items() if k.endswith(".InterfaceType")) for s in sent]
    return Launched(
        nodes=nodes, in_one_group=group is not None and group.strategy == "cluster" and group.members == set(ids),
        talk=lambda a, b, port: sg["GroupId"] in member_groups[b] and admitted(
            member_groups[a], nodes[a].private_ip or "", port),
        from_outside=lambda b, port: admitted(set(), OUTSIDE, port),
        carried={"interfaces": cards})


# --- GCP (tests/fakes/gce.py) --------------------------------------------------------------------------------

def _gcp(instance_type: str) -> Launched:
    from providers.gcp.adapter import GcpProvider
    from providers.gcp.settings import GpuNetwork, Settings
    from tests.contract.harness_gcp import catalog_offer

    server = _GCE_SERVER
    server.fake.reset()
    gpu_networks = [GpuNetwork(network=f"global/networks/gpu-{i}",
                               subnetwork=f"regions/us-central1/subnetworks/gpu-{i}") for i in range(4)]
    p = GcpProvider(Settings(project="orch-test", zones=["us-central1-a"], api_endpoint=server.endpoint,
                             anonymous_credentials=True, retry_attempts=3, retry_initial_wait_s=0.001,
                             retry_max_wait_s=0.01, retry_deadline_s=600.0, operation_timeout_s=10.0,
                             gpu_networks=gpu_networks))
    offer = replace(catalog_offer(Market.ON_DEMAND, "g2-standard-24", "us-central1"), instance_type=instance_type)
    nodes = [p.launch(_spec(offer, "alice", rank)) for rank in (0, 1)]
    p.close()
    keys = [tuple(n.instance_id.split("/", 1)) for n in nodes]
    raw = [server.fake.instance(*k) or {} for k in keys]
    policies = [{u.rsplit("/", 1)[-1] for u in r.get("resourcePolicies", [])} for r in raw]
    in_one = len(policies[0]) == 1 and policies[0] == policies[1] and server.fake.policy(
        "us-central1", next(iter(policies[0]))) is not None
    assert not server.fake.refusals, server.fake.refusals
    return Launched(
        nodes=nodes, in_one_group=in_one,
        talk=lambda a, b, port: server.fake.reachable(keys[a], keys[b], port),  # type: ignore[arg-type]
        from_outside=lambda b, port: server.fake.reachable_from(OUTSIDE, keys[b], port),  # type: ignore[arg-type]
        carried={"interfaces": [[(x["network"].rsplit("/", 1)[-1], x.get("nicType")) for x in r["networkInterfaces"]]
                                for r in raw]})


# --- Azure (tests/fakes/azure_arm.py) ------------------------------------------------------------------------

def _azure(instance_type: str) -> Launched:
    from providers.azure.adapter import AzureProvider
    from providers.retry import RetryPolicy
    from tests.contract.harness_azure import catalog_offer, make_settings

    arm = _ARM
    arm.reset()
    p = AzureProvider(make_settings(arm.url), retry=RetryPolicy.fast())  # type: ignore[arg-type]
    offer = replace(catalog_offer(Market.ON_DEMAND), instance_type=instance_type)
    nodes = [p.launch(_spec(offer, "alice", rank, launch_id=f"l00000000000{rank}")) for rank in (0, 1)]
    p.close()
    vms = [arm.state.vms[("orch-test", n.instance_id)] for n in nodes]
    ppgs = [(vm["properties"].get("proximityPlacementGroup") or {}).get("id") for vm in vms]
    return Launched(
        nodes=nodes, in_one_group=bool(ppgs[0]) and ppgs[0] == ppgs[1] and len(arm.state.ppgs) == 1,
        talk=lambda a, b, port: arm.reachable(nodes[a].instance_id, nodes[b].instance_id, port),
        from_outside=lambda b, port: arm.reachable_from(OUTSIDE, nodes[b].instance_id, port),
        carried={"availability_sets": [(vm["properties"].get("availabilitySet") or {}).get("id") for vm in vms],
                 "images": [vm["properties"]["storageProfile"]["imageReference"] for vm in vms],
                 "zones": [vm.get("zones") for vm in vms]})


def _spec(offer: Offer, owner: str, rank: int, launch_id: str | None = None) -> LaunchSpec:
    return LaunchSpec(launch_id=launch_id or new_launch_id(), owner=owner, job="llama-finetune", offer=offer,
                      startup_script="#!/bin/sh\necho hi\n", node_rank=rank, gang=GANG)


# --- the fakes, once for the module ------------------------------------------------------------------------

_AWS_FAKE: Any = None
_GCE_SERVER: Any = None
_ARM: Any = None


@pytest.fixture(scope="module", autouse=True)
def _fakes() -> Iterator[None]:
    global _AWS_FAKE, _GCE_SERVER, _ARM
    pytest.importorskip("azure.mgmt.compute")
    from tests.fakes.aws import FakeAws
    from tests.fakes.azure_arm import FakeArm
    from tests.fakes.gce import GceServer

    _AWS_FAKE, _GCE_SERVER, _ARM = FakeAws(), GceServer().start(), FakeArm()
    _ARM.serve()
    yield
    _AWS_FAKE.close()
    _GCE_SERVER.stop()
    _ARM.close()


def _render(instance: Instance, provider: str) -> str:
    """Node 1's startup script for the example, on the fabric the launch reports."""
    from orchestrator.manifest.loader import parse_text
    from orchestrator.runtime.from_manifest import LaunchFacts, render_input_for
    from orchestrator.runtime.render import render_script

    [(manifest, _)] = parse_text(EXAMPLE.read_text())
    assert manifest.resources.nodes == 2
    # The boot script is rendered before the launch, from the catalog: it must agree with what the launch did.
    assert attached_fabric(provider, instance.instance_type, manifest.resources.nodes) is instance.fabric
    facts = LaunchFacts(node_rank=1, master_addr="10.0.0.5", gpus_per_node=8, fabric=instance.fabric)
    return render_script(render_input_for(manifest, facts))


FABRIC_TYPES = {"aws": ("p4d.24xlarge", Fabric.EFA), "gcp": ("a3-highgpu-8g", Fabric.GPUDIRECT_TCPX),
                "azure": ("Standard_ND96asr_v4", Fabric.INFINIBAND)}
PLAIN_TYPES = {"aws": "g5.48xlarge", "gcp": "g2-standard-48", "azure": "Standard_NC24ads_A100_v4"}
LAUNCH = {"aws": _aws, "gcp": _gcp, "azure": _azure}


def _common(cloud: str, launched: Launched) -> None:
    assert launched.in_one_group, f"{cloud}: both nodes in one placement group"
    for port in (RENDEZVOUS, NCCL_PORT):
        assert launched.talk(0, 1, port) and launched.talk(1, 0, port), f"{cloud}: the gang's rule admits {port}"
    for port in (SSH, RENDEZVOUS):
        assert not launched.from_outside(1, port), f"{cloud}: nothing from outside on {port} unless configured"
    assert launched.nodes[0].private_ip and launched.nodes[0].private_ip != launched.nodes[1].private_ip


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_two_node_example_on_a_fabric_type(cloud: str) -> None:
    instance_type, fabric = FABRIC_TYPES[cloud]
    launched = LAUNCH[cloud](instance_type)
    _common(cloud, launched)
    assert [n.fabric for n in launched.nodes] == [fabric, fabric], "each node reads back on the fabric"
    carried = launched.carried
    if cloud == "aws":
        assert carried["interfaces"] == [["efa"] * 4] * 2, "p4d: one EFA interface per network card"
    elif cloud == "gcp":
        gpu = [(f"gpu-{i}", "GVNIC") for i in range(4)]
        assert carried["interfaces"] == [[("default", "GVNIC"), *gpu]] * 2, "A3 High: four GPU NICs, all gVNIC"
    else:
        [avset] = set(carried["availability_sets"])
        assert avset and avset.endswith(f"/availabilitySets/orch-alice-{GANG}"), "one IB availability set"
        assert {(i["publisher"], i["offer"]) for i in carried["images"]} == {("microsoft-dsvm", "ubuntu-hpc")}
        assert carried["zones"] == [None, None], "an availability set takes no zone"
    script = _render(launched.nodes[1], cloud)
    assert "10.0.0.5" in script, "rank 1 joins node 0's address"
    if fabric is Fabric.EFA:
        assert "FI_PROVIDER=efa" in script and "FI_EFA_USE_DEVICE_RDMA=1" in script   # libfabric, not IB verbs
        assert "--device=/dev/infiniband" in script and "$ORCH_RDMA_ARGS" in script
    elif fabric is Fabric.INFINIBAND:
        assert "NCCL_IB_DISABLE" not in script and "FI_PROVIDER" not in script, "NCCL's IB transport stays on"
        assert "--device=/dev/infiniband" in script and "memlock=-1" in script
    else:
        assert "NCCL_IB_DISABLE=1" in script and "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=/run/tcpx" in script
        assert "nccl-plugin-gpudirecttcpx install" in script and "tcpgpudmarxd" in script
        assert 'NCCL_GPUDIRECTTCPX_SOCKET_IFNAME="$ORCH_GPU_NICS"' in script
        assert "-v /var/lib/tcpx/lib64:/var/lib/tcpx/lib64" in script and "-e NCCL_GPUDIRECTTCPX_CTRL_DEV" in script
    note = fabric_note(cloud, instance_type, 2)
    assert note is not None and "points NCCL at it" in note and "plain TCP" not in note


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_two_node_example_without_a_fabric_is_plain_tcp_and_the_plan_warns(cloud: str) -> None:
    launched = LAUNCH[cloud](PLAIN_TYPES[cloud])
    _common(cloud, launched)
    assert [n.fabric for n in launched.nodes] == [None, None]
    script = _render(launched.nodes[1], cloud)
    assert "NCCL_IB_DISABLE=1" in script and "NCCL_SOCKET_IFNAME=" in script
    assert not any(s in script for s in ("FI_PROVIDER", "/dev/infiniband", "GPUDIRECTTCPX"))
    note = fabric_note(cloud, PLAIN_TYPES[cloud], 2)
    assert note is not None and "plain TCP" in note, "orch plan warns: NCCL over plain TCP"


def test_orch_plan_warns_when_the_example_would_run_over_plain_tcp(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The example on a GPU whose machines have no fabric: `orch plan` says NCCL runs over plain TCP."""
    from typer.testing import CliRunner

    from orchestrator.cli.main import app

    text = EXAMPLE.read_text().replace("gpu: [H100-80G, A100-80G]", "gpu: A10G").replace(
        "  interconnect: nvlink\n", "").replace("code: {path: examples}", "code: {enabled: false}")
    manifest = tmp_path / "plain.yaml"
    manifest.write_text(text)
    config = tmp_path / "config.yaml"
    config.write_text("owner: alice\nproviders:\n  aws: {regions: [us-east-1]}\n")
    monkeypatch.setenv("ORCH_CONFIG", str(config))
    result = CliRunner().invoke(app, ["plan", str(manifest), "--configured", "-a", "0"], catch_exceptions=False)
    flat = " ".join(result.stdout.split())
    assert "chosen aws g5.48xlarge" in flat and "x2 nodes" in flat, result.stdout
    assert "NCCL runs over TCP between the nodes (plain TCP: slow for multi-node training)" in flat
