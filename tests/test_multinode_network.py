"""Multi-node jobs form on the clouds: a gang's nodes share one placement group and a rule that lets them
talk, and nothing is open to the outside by default. Against moto (+ tests/fakes/aws_placement.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from providers.aws.adapter import AwsProvider
from providers.aws.placement import TAG_GANG, group_name
from providers.base import TAG_LAUNCH_ID, TAG_OWNER, LaunchSpec, Market, ResourceKind, new_launch_id
from providers.errors import ResourceInUseError
from providers.fabric import Fabric, attached_fabric
from tests.contract.harness_aws import catalog_offer
from tests.fakes.aws import FakeAws
from tests.test_aws_adapter import OWNER, _ec2, _group, _session, _settings

GANG = "j7-g0"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAws]:
    f = FakeAws()
    yield f
    f.close()


def _node(rank: int, gang: str = GANG) -> LaunchSpec:
    return LaunchSpec(launch_id=new_launch_id(), owner=OWNER, job="two-node", offer=catalog_offer(Market.ON_DEMAND),
                      startup_script="#!/bin/sh\necho hi\n", node_rank=rank, gang=gang)


def test_aws_gang_in_one_cluster_placement_group_whose_group_rule_lets_them_talk(fake: FakeAws) -> None:
    fake.reset()
    p = AwsProvider(_settings(fake), session=_session())
    nodes = [p.launch(_node(0)), p.launch(_node(1))]
    name = group_name(OWNER, GANG)
    assert fake.requests["CreatePlacementGroup"] == 1, "the second node finds the gang's group"
    group = fake.placement.group(name)
    assert group is not None and group.strategy == "cluster"
    assert group.tags[TAG_OWNER] == OWNER and group.tags[TAG_GANG] == GANG and group.tags[TAG_LAUNCH_ID]
    ids = [n.instance_id.split("/")[1] for n in nodes]
    assert group.members == set(ids), "both nodes were launched into it"
    # One security group for both, admitting its own members on every protocol and port.
    sg = _group(fake)
    assert sg is not None
    described = _ec2(fake).describe_instances(InstanceIds=ids)
    held = [i for r in described["Reservations"] for i in r["Instances"]]
    assert {g["GroupId"] for i in held for g in i["SecurityGroups"]} == {sg["GroupId"]}
    assert all({"Key": TAG_GANG, "Value": GANG} in i["Tags"] for i in held)
    [rule] = sg["IpPermissions"]  # type: ignore[misc]
    assert rule["IpProtocol"] == "-1" and [pair["GroupId"] for pair in rule["UserIdGroupPairs"]] == [sg["GroupId"]]
    # The rendezvous: node 0's private address, which the group admits from node 1.
    assert nodes[0].private_ip and nodes[0].private_ip != nodes[1].private_ip

    # Garbage collection: the group is held while a node is, deleted after.
    [listed] = [r for r in p.list_network_resources(OWNER) if r.kind is ResourceKind.PLACEMENT_GROUP]
    assert listed.in_use and listed.name == name
    with pytest.raises(ResourceInUseError):
        p.delete_network_resource(listed)
    for n in nodes:
        p.terminate(n.instance_id)
    [unused] = [r for r in p.list_network_resources(OWNER) if r.kind is ResourceKind.PLACEMENT_GROUP]
    assert not unused.in_use
    p.delete_network_resource(unused)
    assert fake.placement.group(name) is None
    p.delete_network_resource(unused)                           # missing == success
    p.close()


def test_aws_single_node_asks_for_no_placement_group(fake: FakeAws) -> None:
    fake.reset()
    p = AwsProvider(_settings(fake), session=_session())
    p.launch(_node(0, gang=""))
    assert fake.requests["CreatePlacementGroup"] == 0
    assert not any(k.startswith("Placement.GroupName") for k in fake.sent["RunInstances"])
    assert not [r for r in p.list_network_resources(OWNER) if r.kind is ResourceKind.PLACEMENT_GROUP]


def test_aws_launch_heals_a_placement_group_deleted_under_it(fake: FakeAws) -> None:
    """GC may delete an unused group between ensure and RunInstances: launch ensures it again, once."""
    fake.reset()
    p = AwsProvider(_settings(fake), session=_session())
    fake.fail("RunInstances", "InvalidPlacementGroup.Unknown", times=1)
    inst = p.launch(_node(0))
    assert fake.requests["RunInstances"] == 2 and inst.launch_id


def _efa_node(rank: int) -> LaunchSpec:
    o = replace(catalog_offer(Market.ON_DEMAND), instance_type="p4d.24xlarge")
    return LaunchSpec(launch_id=new_launch_id(), owner=OWNER, job="two-node", offer=o,
                      startup_script="#!/bin/sh\necho hi\n", node_rank=rank, gang=GANG)


def test_aws_efa_gang_launches_with_one_efa_interface_per_card_in_the_group(fake: FakeAws) -> None:
    fake.reset()
    p = AwsProvider(_settings(fake), session=_session())
    nodes = []
    for rank in (0, 1):
        nodes.append(p.launch(_efa_node(rank)))
        sent = fake.sent["RunInstances"]
        sg = _group(fake)
        assert sg is not None
        cards = sorted(k for k in sent if k.endswith(".InterfaceType"))
        assert len(cards) == 4 and all(sent[k] == "efa" for k in cards), "p4d: 4 network cards, EFA on each"
        assert sorted(sent[f"NetworkInterface.{i}.NetworkCardIndex"] for i in range(1, 5)) == ["0", "1", "2", "3"]
        assert all(sent[f"NetworkInterface.{i}.SecurityGroupId.1"] == sg["GroupId"] for i in range(1, 5))
        assert not any(k.startswith("SecurityGroupId") for k in sent), "the groups ride on the interfaces"
        assert sent["Placement.GroupName"] == group_name(OWNER, GANG)
    assert all(n.fabric is Fabric.EFA for n in nodes)
    assert all(i.fabric is Fabric.EFA for i in p.list_instances(OWNER))
    # A single p4d (no gang) gets the plain interface: EFA only helps between machines.
    p.launch(replace(_efa_node(0), gang=""))
    assert not any(k.startswith("NetworkInterface") for k in fake.sent["RunInstances"])


def _two_node(instance_type: str, provider: str = "aws") -> str:
    from orchestrator.manifest.loader import parse_text
    from orchestrator.runtime.from_manifest import LaunchFacts, render_input_for
    from orchestrator.runtime.render import render_script

    text = (Path(__file__).parent.parent / "examples" / "torchrun-ddp.yaml").read_text()
    [(manifest, _)] = parse_text(text)
    facts = LaunchFacts(node_rank=1, master_addr="10.0.0.5", gpus_per_node=8,
                        fabric=attached_fabric(provider, instance_type, manifest.resources.nodes))
    return render_script(render_input_for(manifest, facts))


def test_the_two_node_example_renders_nccl_for_its_fabric() -> None:
    efa = _two_node("p4d.24xlarge")
    assert "FI_PROVIDER=efa" in efa and "FI_EFA_USE_DEVICE_RDMA=1" in efa
    tcp = _two_node("g5.48xlarge")
    assert "FI_PROVIDER" not in tcp and "NCCL_IB_DISABLE=1" in tcp and "NCCL_SOCKET_IFNAME" in tcp
    # A fabric orch does not attach yet (GCP A3 Ultra's RoCE) renders plain TCP, as the plan warns.
    roce = _two_node("a3-ultragpu-8g", "gcp")
    assert "FI_PROVIDER" not in roce and "NCCL_IB_DISABLE=1" in roce and "/dev/infiniband" not in roce
    assert "10.0.0.5" in efa, "rank 1 joins node 0's private address"


def test_azure_gang_in_one_proximity_placement_group_and_the_network_rule_lets_them_talk() -> None:
    pytest.importorskip("azure.mgmt.compute")
    from providers.azure.adapter import AzureProvider
    from providers.retry import RetryPolicy
    from tests.contract.harness_azure import make_settings
    from tests.fakes.azure_arm import FakeArm
    from tests.test_azure_adapter import OWNER as AZ_OWNER
    from tests.test_azure_adapter import spec as azure_spec

    arm = FakeArm()
    arm.serve()
    try:
        p = AzureProvider(make_settings(arm.url), retry=RetryPolicy.fast())  # type: ignore[arg-type]
        nodes = [p.launch(azure_spec(f"l00000000000{r}", node_rank=r, gang=GANG)) for r in (0, 1)]
        [ppg] = arm.state.ppgs.values()
        assert ppg["name"] == f"orch-{AZ_OWNER}-{GANG}" and ppg["tags"][TAG_GANG] == GANG
        assert ppg["properties"]["proximityPlacementGroupType"] == "Standard"
        vms = list(arm.state.vms.values())
        assert [vm["properties"]["proximityPlacementGroup"]["id"] for vm in vms] == [ppg["id"]] * 2
        [nsg] = arm.state.nsgs.values()
        [intra] = [r for r in nsg["properties"]["securityRules"] if r["name"] == "orch-intra"]
        assert (intra["properties"]["sourceAddressPrefix"], intra["properties"]["destinationPortRange"]) == (
            "VirtualNetwork", "*")
        assert all(nic["properties"]["networkSecurityGroup"]["id"] == nsg["id"] for nic in arm.state.nics.values())
        assert nodes[0].private_ip and nodes[0].private_ip != nodes[1].private_ip
        [listed] = [r for r in p.list_network_resources(AZ_OWNER) if r.kind is ResourceKind.PLACEMENT_GROUP]
        assert listed.in_use
        for n in nodes:
            p.terminate(n.instance_id)
        for n in nodes:                                      # the fake finishes a delete on the next read
            p.get(n.instance_id)
        [unused] = [r for r in p.list_network_resources(AZ_OWNER) if r.kind is ResourceKind.PLACEMENT_GROUP]
        assert not unused.in_use
        p.delete_network_resource(unused)
        assert not arm.state.ppgs
        single = p.launch(azure_spec("l0000000000a9"))
        assert "proximityPlacementGroup" not in arm.state.vms[("orch-test", single.instance_id)]["properties"]
        p.close()
    finally:
        arm.close()
