"""One proximity placement group per gang (the nodes of one start of a multi-node job) on Azure, so its VMs
sit close together (low latency between them). Pure functions: names, the body, and reading a listing.

* Name ``orch-<owner>-<gang>`` (``LaunchSpec.gang``), type Standard, in the VM's region, tagged
  ``orch:owner``, ``orch:gang`` and the launch id of the node that created it; every node's launch PUTs it
  when it is missing (a PUT of the same body is idempotent), and the VM names it in
  ``properties.proximityPlacementGroup``.
* ARM lists the group's VMs in ``properties.virtualMachines`` (and its availability sets in
  ``availabilitySets``): the group is in use while either is not empty, and garbage collection
  (providers.leftovers) deletes it after.
* A single-node launch asks for no group.
https://learn.microsoft.com/azure/virtual-machines/co-location
"""

from __future__ import annotations

from azure.mgmt.compute import models as cm

from providers.base import TAG_LAUNCH_ID, TAG_OWNER, CloudResource, ResourceKind

TAG_GANG = "orch:gang"


def ppg_name(owner: str, gang: str) -> str:
    return f"orch-{owner}-{gang}"


def ppg_body(location: str, *, owner: str, gang: str, launch_id: str) -> cm.ProximityPlacementGroup:
    return cm.ProximityPlacementGroup(
        location=location, tags={TAG_OWNER: owner, TAG_GANG: gang, TAG_LAUNCH_ID: launch_id},
        properties=cm.ProximityPlacementGroupProperties(proximity_placement_group_type="Standard"))


def owned_ppgs(owner: str, ppgs: list[cm.ProximityPlacementGroup]) -> list[CloudResource]:
    """This owner's proximity placement groups, each in use while ARM lists a VM in it."""
    out: list[CloudResource] = []
    for g in ppgs:
        tags = dict(g.tags or {})
        if tags.get(TAG_OWNER) != owner or TAG_GANG not in tags:
            continue
        # ARM refuses to delete a group that still holds a VM or an availability set.
        used = bool(g.properties and (g.properties.virtual_machines or g.properties.availability_sets))
        out.append(CloudResource(provider="azure", kind=ResourceKind.PLACEMENT_GROUP, resource_id=g.id or "",
                                 name=g.name or "", owner=owner, in_use=used, launch_id=tags.get(TAG_LAUNCH_ID),
                                 region=g.location))
    return out


# --- InfiniBand (ND series) ------------------------------------------------------------------------------
# VMs share one InfiniBand fabric only when placed in one availability set or scale set ("setup-infiniband":
# https://learn.microsoft.com/azure/virtual-machines/setup-infiniband). A gang on an InfiniBand size therefore
# gets an availability set ``orch-<owner>-<gang>`` inside its proximity placement group (sku Aligned: managed
# disks; one fault and one update domain, so nothing splits the gang), and the HPC marketplace image whose
# drivers (Mellanox OFED, the IB verbs stack) NCCL's InfiniBand transport needs (Settings.ib_image). A VM in
# an availability set takes no availability zone (ARM refuses both). Garbage collection deletes the set once
# ARM lists no VM in it, then the proximity group once it lists neither a VM nor the set.


def uses_infiniband(instance_type: str, *, gang: str) -> bool:
    """Whether a launch of ``instance_type`` goes onto the InfiniBand fabric: a multi-node gang on an ND size."""
    from providers.fabric import Fabric, instance_fabric

    fact = instance_fabric("azure", instance_type)
    return bool(gang) and fact is not None and fact.fabric is Fabric.INFINIBAND


def avset_name(owner: str, gang: str) -> str:
    return f"orch-{owner}-{gang}"


def avset_body(location: str, *, ppg_id: str, owner: str, gang: str, launch_id: str) -> cm.AvailabilitySet:
    return cm.AvailabilitySet(
        location=location, tags={TAG_OWNER: owner, TAG_GANG: gang, TAG_LAUNCH_ID: launch_id},
        sku=cm.Sku(name="Aligned"),
        properties=cm.AvailabilitySetProperties(
            platform_fault_domain_count=1, platform_update_domain_count=1,
            proximity_placement_group=cm.SubResource(id=ppg_id)))


def owned_avsets(owner: str, sets: list[cm.AvailabilitySet]) -> list[CloudResource]:
    """This owner's gang availability sets, each in use while ARM lists a VM in it."""
    out: list[CloudResource] = []
    for a in sets:
        tags = dict(a.tags or {})
        if tags.get(TAG_OWNER) != owner or TAG_GANG not in tags:
            continue
        used = bool(a.properties and a.properties.virtual_machines)
        out.append(CloudResource(provider="azure", kind=ResourceKind.AVAILABILITY_SET, resource_id=a.id or "",
                                 name=a.name or "", owner=owner, in_use=used, launch_id=tags.get(TAG_LAUNCH_ID),
                                 region=a.location))
    return out
