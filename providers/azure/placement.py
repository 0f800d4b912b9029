"""One proximity placement group per gang (the nodes of one start of a multi-node job) on Azure, so its VMs
sit close together (low latency between them). Pure functions: names, the body, and reading a listing.

* Name ``orch-<owner>-<gang>`` (``LaunchSpec.gang``), type Standard, in the VM's region, tagged
  ``orch:owner``, ``orch:gang`` and the launch id of the node that created it; every node's launch PUTs it
  when it is missing (a PUT of the same body is idempotent), and the VM names it in
  ``properties.proximityPlacementGroup``.
* ARM lists the group's VMs in ``properties.virtualMachines``: the group is in use while that list is not
  empty, and garbage collection (providers.leftovers) deletes it after.
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
        used = bool(g.properties and g.properties.virtual_machines)
        out.append(CloudResource(provider="azure", kind=ResourceKind.PLACEMENT_GROUP, resource_id=g.id or "",
                                 name=g.name or "", owner=owner, in_use=used, launch_id=tags.get(TAG_LAUNCH_ID),
                                 region=g.location))
    return out
