"""One EC2 cluster placement group per gang (the nodes of one start of a multi-node job), so its nodes sit
close together on the network (the low-latency, high-bandwidth placement EFA is built for). Raw boto3
calls: the adapter runs each through its one translate-and-retry path.

* Name ``orch-<owner>-<gang>`` (``LaunchSpec.gang``), strategy ``cluster``, tagged ``orch:owner``,
  ``orch:gang`` and the launch id of the node that created it. Created idempotently by every node's launch
  (describe by name, create, ``InvalidPlacementGroup.Duplicate`` from a concurrent node means "found").
* Each instance of the gang carries the tag ``orch:gang`` too: a group is in use while an instance in a
  holding state carries its gang, so garbage collection (providers.leftovers) deletes it once the gang's
  machines are gone. EC2 itself refuses to delete a group that still holds an instance
  (``InvalidPlacementGroup.InUse``, read as ResourceInUseError).
* A single-node launch asks for no group.

https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html#placement-groups-cluster
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from providers.base import TAG_LAUNCH_ID, TAG_OWNER, CloudResource, ResourceKind

PROVIDER = "aws"
TAG_GANG = "orch:gang"
STRATEGY = "cluster"
#: The instance states in which an instance still belongs to its placement group.
HOLDING_STATES = ["pending", "running", "shutting-down", "stopping", "stopped"]


def group_name(owner: str, gang: str) -> str:
    """``orch-<owner>-<gang>``: EC2 allows up to 255 ASCII characters."""
    return f"orch-{owner}-{gang}"[:255]


def ensure_group(ec2: Any, *, owner: str, gang: str, launch_id: str) -> str:
    """The name of ``gang``'s cluster placement group, created if missing."""
    name = group_name(owner, gang)
    if _find(ec2, name) is not None:
        return name
    tags = [{"Key": TAG_OWNER, "Value": owner}, {"Key": TAG_GANG, "Value": gang},
            {"Key": TAG_LAUNCH_ID, "Value": launch_id}]
    try:
        ec2.create_placement_group(GroupName=name, Strategy=STRATEGY,
                                   TagSpecifications=[{"ResourceType": "placement-group", "Tags": tags}])
    except ClientError as exc:   # another node of the gang made it first: the same group
        if exc.response.get("Error", {}).get("Code") != "InvalidPlacementGroup.Duplicate":
            raise
    return name


def _find(ec2: Any, name: str) -> dict[str, Any] | None:
    found = ec2.describe_placement_groups(Filters=[{"Name": "group-name", "Values": [name]}])["PlacementGroups"]
    return found[0] if found else None


def list_groups(ec2: Any, region: str, owner: str) -> list[CloudResource]:
    """This owner's placement groups in ``region``, each in use while an instance of its gang holds on."""
    groups = ec2.describe_placement_groups(Filters=[{"Name": f"tag:{TAG_OWNER}", "Values": [owner]}])[
        "PlacementGroups"]
    out: list[CloudResource] = []
    for g in groups:
        tags = {t["Key"]: t["Value"] for t in g.get("Tags", [])}
        gang = tags.get(TAG_GANG, "")
        out.append(CloudResource(provider=PROVIDER, kind=ResourceKind.PLACEMENT_GROUP,
                                 resource_id=f"{region}/{g['GroupName']}", name=g["GroupName"], owner=owner,
                                 in_use=bool(gang) and _gang_holds(ec2, owner, gang),
                                 launch_id=tags.get(TAG_LAUNCH_ID), region=region))
    return out


def _gang_holds(ec2: Any, owner: str, gang: str) -> bool:
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[
        {"Name": f"tag:{TAG_OWNER}", "Values": [owner]}, {"Name": f"tag:{TAG_GANG}", "Values": [gang]},
        {"Name": "instance-state-name", "Values": HOLDING_STATES}])
    return any(r.get("Instances") for page in pages for r in page.get("Reservations", []))


def delete_group(ec2: Any, resource: CloudResource) -> None:
    """Delete a placement group (raw call: Unknown and InUse are translated by the adapter)."""
    ec2.delete_placement_group(GroupName=resource.resource_id.partition("/")[2])
