"""Multi-node jobs form on the clouds: a gang's nodes share one placement group and a rule that lets them
talk, and nothing is open to the outside by default. Against moto (+ tests/fakes/aws_placement.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from providers.aws.adapter import AwsProvider
from providers.aws.placement import TAG_GANG, group_name
from providers.base import TAG_LAUNCH_ID, TAG_OWNER, LaunchSpec, Market, ResourceKind, new_launch_id
from providers.errors import ResourceInUseError
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
