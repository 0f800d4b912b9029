"""What orch creates on EC2 besides instances, and how it finds and removes it. Raw boto3 calls: the
adapter runs each through its one translate-and-retry path.

* One security group per VPC and owner, ``orch-<owner>``, tagged ``orch:owner`` (only when no
  ``security_group_ids`` are configured). It admits all traffic from members of the group itself, so the
  nodes of a multi-node gang reach each other (torchrun's rendezvous, NCCL's sockets: ports chosen at run
  time), and TCP 22 from ``ssh_ingress_cidrs`` only (none by default: nothing outside the group gets in).
  Created idempotently at launch (describe by VPC + name, create, a Duplicate from a concurrent launch
  means "found"); the self rule is added when missing and the port-22 rules are brought to the configured
  ranges each time. It is deleted by garbage collection once no instance uses it: EC2 refuses
  (DependencyViolation) while an instance still holds it.
* One key pair per launch, ``orch-<launch id>`` (the job's public key), tagged like the instance; a leftover
  once no live instance names it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from providers.base import TAG_LAUNCH_ID, TAG_OWNER, CloudResource, ResourceKind

PROVIDER = "aws"
SSH_PORT = 22
#: An instance in one of these states still holds its network interface (and so its security groups).
HOLDING_STATES = ["pending", "running", "shutting-down", "stopping", "stopped"]


def ssh_group_name(owner: str) -> str:
    return f"orch-{owner}"


def vpc_of(ec2: Any, subnet_id: str | None) -> str:
    """The VPC instances will land in: the configured subnet's, else the region's default VPC."""
    if subnet_id:
        return str(ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]["VpcId"])
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    if not vpcs:
        from providers.errors import InvalidRequestError

        raise InvalidRequestError("this region has no default VPC", provider=PROVIDER,
                                  hint="set aws.subnet_id (orch then opens SSH in that subnet's VPC), or "
                                       "aws.security_group_ids")
    return str(vpcs[0]["VpcId"])


def ensure_ssh_group(ec2: Any, *, owner: str, vpc_id: str, cidrs: list[str]) -> str:
    """The id of this owner's node group in ``vpc_id``, created if missing: members admit each other on
    every port, and port 22 admits exactly ``cidrs`` (empty: no one from outside the group)."""
    name = ssh_group_name(owner)
    group = _find_group(ec2, vpc_id, name)
    if group is None:
        tags = [{"Key": TAG_OWNER, "Value": owner}, {"Key": "Name", "Value": name}]
        try:
            ec2.create_security_group(
                GroupName=name, VpcId=vpc_id,
                Description=f"orch ({owner}): the machines orch launches reach each other; SSH if configured",
                TagSpecifications=[{"ResourceType": "security-group", "Tags": tags}])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidGroup.Duplicate":
                raise
        group = _find_group(ec2, vpc_id, name)
        if group is None:   # created, but not yet listed (eventual consistency): the retry finds it
            from providers.errors import ProviderUnavailableError

            raise ProviderUnavailableError(f"security group {name} not visible yet", provider=PROVIDER)
    _ensure_self_rule(ec2, group)
    _sync_ssh_rules(ec2, group, cidrs)
    return str(group["GroupId"])


def admits_itself(group: dict[str, Any]) -> bool:
    """Whether the group admits all traffic (every protocol and port) from its own members."""
    return any(perm.get("IpProtocol") == "-1"
               and any(pair.get("GroupId") == group["GroupId"] for pair in perm.get("UserIdGroupPairs", []))
               for perm in group.get("IpPermissions", []))


def _ensure_self_rule(ec2: Any, group: dict[str, Any]) -> None:
    if admits_itself(group):
        return
    perm = {"IpProtocol": "-1", "UserIdGroupPairs": [
        {"GroupId": group["GroupId"], "Description": "orch: nodes of one gang reach each other"}]}
    try:
        ec2.authorize_security_group_ingress(GroupId=group["GroupId"], IpPermissions=[perm])
    except ClientError as exc:   # a concurrent launch added it first
        if exc.response.get("Error", {}).get("Code") != "InvalidPermission.Duplicate":
            raise


def _find_group(ec2: Any, vpc_id: str, name: str) -> dict[str, Any] | None:
    found = ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc_id]},
                                                  {"Name": "group-name", "Values": [name]}])["SecurityGroups"]
    return found[0] if found else None


def _ssh_ranges(group: dict[str, Any]) -> set[str]:
    have: set[str] = set()
    for perm in group.get("IpPermissions", []):
        if perm.get("IpProtocol") == "tcp" and perm.get("FromPort") == SSH_PORT and perm.get("ToPort") == SSH_PORT:
            have |= {r["CidrIp"] for r in perm.get("IpRanges", [])}
            have |= {r["CidrIpv6"] for r in perm.get("Ipv6Ranges", [])}
    return have


def _permission(cidrs: set[str]) -> dict[str, Any]:
    v6 = sorted(c for c in cidrs if ":" in c)
    v4 = sorted(c for c in cidrs if ":" not in c)
    return {"IpProtocol": "tcp", "FromPort": SSH_PORT, "ToPort": SSH_PORT,
            "IpRanges": [{"CidrIp": c, "Description": "orch ssh"} for c in v4],
            "Ipv6Ranges": [{"CidrIpv6": c, "Description": "orch ssh"} for c in v6]}


def _sync_ssh_rules(ec2: Any, group: dict[str, Any], cidrs: list[str]) -> None:
    have, want = _ssh_ranges(group), set(cidrs)
    if want - have:
        try:
            ec2.authorize_security_group_ingress(GroupId=group["GroupId"], IpPermissions=[_permission(want - have)])
        except ClientError as exc:   # a concurrent launch added them first
            if exc.response.get("Error", {}).get("Code") != "InvalidPermission.Duplicate":
                raise
    if have - want:
        ec2.revoke_security_group_ingress(GroupId=group["GroupId"], IpPermissions=[_permission(have - want)])


def list_resources(ec2: Any, region: str, owner: str) -> list[CloudResource]:
    """This owner's security groups and key pairs in ``region``, each with whether an instance holds it."""
    owner_filter = [{"Name": f"tag:{TAG_OWNER}", "Values": [owner]}]
    groups = [g for page in ec2.get_paginator("describe_security_groups").paginate(Filters=owner_filter)
              for g in page["SecurityGroups"]]
    keys = ec2.describe_key_pairs(Filters=owner_filter)["KeyPairs"]
    used_groups = _holders(ec2, "instance.group-id", [g["GroupId"] for g in groups], "SecurityGroups", "GroupId")
    used_keys = _holders(ec2, "key-name", [k["KeyName"] for k in keys], None, "KeyName")
    out = [CloudResource(provider=PROVIDER, kind=ResourceKind.SECURITY_GROUP, resource_id=f"{region}/{g['GroupId']}",
                         name=g.get("GroupName", ""), owner=owner, in_use=g["GroupId"] in used_groups,
                         region=region)
           for g in groups]
    for k in keys:
        tags = {t["Key"]: t["Value"] for t in k.get("Tags", [])}
        created = k.get("CreateTime")
        out.append(CloudResource(provider=PROVIDER, kind=ResourceKind.KEY_PAIR, resource_id=f"{region}/{k['KeyName']}",
                                 name=k["KeyName"], owner=owner, in_use=k["KeyName"] in used_keys,
                                 created_at=created if isinstance(created, datetime) else None,
                                 launch_id=tags.get(TAG_LAUNCH_ID), region=region))
    return out


def _holders(ec2: Any, filter_name: str, values: list[str], list_field: str | None, key: str) -> set[str]:
    """Which of ``values`` an instance in a HOLDING_STATES state names (its groups, or its key)."""
    if not values:
        return set()
    used: set[str] = set()
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[
        {"Name": filter_name, "Values": values}, {"Name": "instance-state-name", "Values": HOLDING_STATES}])
    for page in pages:
        for reservation in page.get("Reservations", []):
            for inst in reservation.get("Instances", []):
                if list_field is None:
                    used.add(inst.get(key, ""))
                else:
                    used |= {g[key] for g in inst.get(list_field, [])}
    return used & set(values)


def delete_resource(ec2: Any, resource: CloudResource) -> None:
    """Delete a security group or key pair (raw call: NotFound and DependencyViolation are translated)."""
    handle = resource.resource_id.partition("/")[2]
    if resource.kind is ResourceKind.SECURITY_GROUP:
        ec2.delete_security_group(GroupId=handle)
    elif resource.kind is ResourceKind.KEY_PAIR:
        ec2.delete_key_pair(KeyName=handle)
