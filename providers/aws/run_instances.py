"""What ``launch`` sends to RunInstances: the tags, the gzip'd user data and the request's parameters. Pure
functions: the adapter looks up the AMI, key pair, security groups, zone name and placement group first and
passes them in. Imports botocore (through providers.aws.placement): only this package's modules import it."""

from __future__ import annotations

import gzip
from typing import Any

from providers.base import TAG_JOB, TAG_LAUNCH_ID, TAG_OWNER, LaunchSpec, Market

from . import fabric as efa
from . import placement
from .settings import Settings


def user_data(script: str) -> bytes | str:
    """EC2's UserData for a boot script: gzip'd (cloud-init, on every AMI orch boots, decompresses gzip user data
    and runs the script in it), because EC2 takes 16 KB before base64 and orch's script is mostly base85 text,
    which gzip brings back by a fifth. Deterministic (mtime 0). Empty stays empty."""
    return gzip.compress(script.encode(), compresslevel=9, mtime=0) if script else ""


def snapshot_floor_gb(image: dict[str, Any], device: str) -> int:
    """The least VolumeSize EC2 takes for ``device`` on ``image`` (a DescribeImages entry): the size of the AMI's
    own snapshot for that device; 0 when the AMI maps none there. A smaller one is refused
    (``InvalidBlockDeviceMapping``: "Volume of size 15GB is smaller than snapshot 'snap-...', expect size >= 30GB")."""
    for mapping in image.get("BlockDeviceMappings") or []:
        ebs = mapping.get("Ebs") or {}
        if mapping.get("DeviceName") == device and ebs.get("SnapshotId"):
            return int(ebs.get("VolumeSize") or 0)
    return 0


def instance_tags(spec: LaunchSpec, *, efa_count: int) -> list[dict[str, str]]:
    """The instance's (and its volume's and key pair's) tags: orch's ids, its name, its gang and its fabric."""
    out = [{"Key": TAG_LAUNCH_ID, "Value": spec.launch_id}, {"Key": TAG_OWNER, "Value": spec.owner},
           {"Key": TAG_JOB, "Value": spec.job}, {"Key": "Name", "Value": spec.name}]
    if spec.gang:   # how garbage collection knows the gang's placement group is still held
        out.append({"Key": placement.TAG_GANG, "Value": spec.gang})
    if efa_count:
        out.append({"Key": efa.TAG_FABRIC, "Value": "efa"})
    return out


def params(settings: Settings, spec: LaunchSpec, *, image_id: str, tags: list[dict[str, str]], key_name: str | None,
           groups: list[str], zone_name: str | None, placement_group: str | None, efa_count: int,
           root_floor_gb: int = 0) -> dict[str, Any]:
    """RunInstances' parameters for ``spec``. ``zone_name``: the AZ's name when no subnet is set and the offer
    names a zone; ``placement_group``: the gang's cluster placement group, if a gang; ``efa_count``: the EFA
    interfaces of an EFA gang (providers/aws/fabric.py), else 0; ``root_floor_gb``: the AMI's root snapshot size
    (``snapshot_floor_gb``): the job's disk is the least it gets, so a smaller one is raised to it."""
    result: dict[str, Any] = {
        # The machine image, never the job's container (spec.image runs inside it: docker on this AMI).
        "ImageId": image_id,
        "InstanceType": spec.offer.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": spec.launch_id,
        "UserData": user_data(spec.startup_script),
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags},
                              {"ResourceType": "volume", "Tags": tags}],
        "BlockDeviceMappings": [{"DeviceName": settings.root_device_name,
                                 "Ebs": {"VolumeSize": max(spec.disk_size(), root_floor_gb),
                                         "DeleteOnTermination": True}}],
    }
    if key_name:
        result["KeyName"] = key_name
    if groups:
        result["SecurityGroupIds"] = groups
    if settings.instance_profile:
        profile = settings.instance_profile
        result["IamInstanceProfile"] = {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}
    if settings.subnet_id:
        result["SubnetId"] = settings.subnet_id
    elif zone_name is not None:
        result["Placement"] = {"AvailabilityZone": zone_name}
    if placement_group is not None:   # a multi-node gang: its nodes in one cluster placement group
        result["Placement"] = {**result.get("Placement", {}), "GroupName": placement_group}
    if efa_count:   # the interfaces carry the groups and subnet (EC2 refuses them on both levels)
        result["NetworkInterfaces"] = efa.efa_interfaces(
            efa_count, groups=result.pop("SecurityGroupIds", []), subnet_id=result.pop("SubnetId", None))
    if spec.offer.market is Market.SPOT:
        spot: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
        if spec.max_price_hr is not None:
            spot["MaxPrice"] = f"{spec.max_price_hr:.4f}"
        result["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
    return result
