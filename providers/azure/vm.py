"""The VirtualMachine PUT body orch sends for a launch: size, image, OS disk, SSH key and boot script, the NIC,
Spot fields and the node's identity. Pure (SDK models only); the adapter adds the gang's placement and PUTs it.
"""

from __future__ import annotations

import base64

from azure.mgmt.compute import models as cm

from providers.base import LaunchSpec, Market
from providers.fabric import Fabric

from . import placement
from .instances import TAG_FABRIC
from .settings import Settings


def vm_body(settings: Settings, spec: LaunchSpec, *, nic_id: str, tags: dict[str, str]) -> cm.VirtualMachine:
    """The VirtualMachine PUT body for ``spec`` on the NIC ``nic_id``, tagged ``tags`` (plus ``orch:fabric`` on an
    InfiniBand gang, whose VM boots ``settings.ib_image``)."""
    s = settings
    ib = placement.uses_infiniband(spec.offer.instance_type, gang=spec.gang)
    img = s.ib_image if ib else s.image   # an InfiniBand gang needs the image with the IB drivers
    if ib:   # how reading the VM back knows it was launched onto the fabric
        tags = {**tags, TAG_FABRIC: Fabric.INFINIBAND.value}
    props = cm.VirtualMachineProperties(
        hardware_profile=cm.HardwareProfile(vm_size=spec.offer.instance_type),
        storage_profile=cm.StorageProfile(
            image_reference=cm.ImageReference(publisher=img.publisher, offer=img.offer, sku=img.sku,
                                              version=img.version),
            os_disk=cm.OSDisk(
                name=f"{spec.name}-osdisk", create_option="FromImage", disk_size_gb=spec.disk_size(),
                delete_option="Delete", managed_disk=cm.ManagedDiskParameters(storage_account_type=s.os_disk_type),
            ),
        ),
        os_profile=cm.OSProfile(
            computer_name=spec.name[:64],
            admin_username=s.admin_username,
            custom_data=base64.b64encode(spec.startup_script.encode()).decode() if spec.startup_script else None,
            linux_configuration=cm.LinuxConfiguration(
                disable_password_authentication=True,
                ssh=cm.SshConfiguration(public_keys=[
                    cm.SshPublicKey(path=f"/home/{s.admin_username}/.ssh/authorized_keys",
                                    key_data=spec.ssh_public_key),
                ]) if spec.ssh_public_key else None,
            ),
        ),
        network_profile=cm.NetworkProfile(network_interfaces=[
            cm.NetworkInterfaceReference(
                id=nic_id, properties=cm.NetworkInterfaceReferenceProperties(primary=True, delete_option="Delete"),
            ),
        ]),
    )
    if spec.offer.market is Market.SPOT:
        props.priority = "Spot"
        props.eviction_policy = "Deallocate"
        props.billing_profile = cm.BillingProfile(max_price=spec.max_price_hr if spec.max_price_hr else -1)
    zones = [spec.offer.zone] if spec.offer.zone else None
    return cm.VirtualMachine(location=spec.offer.region, tags=tags, zones=zones, properties=props,
                             identity=_identity(s.managed_identity))


def _identity(wanted: str | None) -> cm.VirtualMachineIdentity | None:
    """The node's identity for the checkpoint store (settings.managed_identity), or none."""
    if wanted is None:
        return None
    if wanted == "system":
        return cm.VirtualMachineIdentity(type="SystemAssigned")
    return cm.VirtualMachineIdentity(type="UserAssigned",
                                     user_assigned_identities={wanted: cm.UserAssignedIdentitiesValue()})
