"""What a launch puts in place before the VM, through Arm: the public IP, the owner's shared SSH NSG and the NIC
(bodies from providers.azure.network), and a multi-node gang's proximity placement group and availability set
(bodies from providers.azure.placement), each PUT when missing and read back; and the tags they all carry.
Imports the Azure SDK: only this package's modules import it."""

from __future__ import annotations

from azure.mgmt.compute import models as cm
from azure.mgmt.network import models as nm

from providers.base import TAG_JOB, TAG_LAUNCH_ID, TAG_OWNER, LaunchSpec

from . import network, placement
from .arm import Arm


def launch_tags(spec: LaunchSpec) -> dict[str, str]:
    """orch's ids, on the VM and on everything made for it."""
    return {TAG_LAUNCH_ID: spec.launch_id, TAG_OWNER: spec.owner, TAG_JOB: spec.job}


def ensure_public_ip(arm: Arm, spec: LaunchSpec, tags: dict[str, str]) -> nm.PublicIPAddress:
    rg, ops = arm.rg, arm.network().public_ip_addresses
    name = network.pip_name(spec.name)
    body = network.public_ip_body(spec.offer.region, tags)
    arm.wait(arm.call(lambda: ops.begin_create_or_update(rg, name, body)), arm.settings.create_wait_s)
    pip: nm.PublicIPAddress = arm.call(lambda: ops.get(rg, name))
    return pip


def ensure_ppg(arm: Arm, spec: LaunchSpec) -> str:
    """The id of ``spec.gang``'s proximity placement group, PUT when missing (providers.azure.placement)."""
    rg, ops = arm.rg, arm.compute().proximity_placement_groups
    name = placement.ppg_name(spec.owner, spec.gang)
    current: cm.ProximityPlacementGroup | None = arm.absent_ok(lambda: ops.get(rg, name))
    if current is None:
        body = placement.ppg_body(spec.offer.region, owner=spec.owner, gang=spec.gang, launch_id=spec.launch_id)
        current = arm.call(lambda: ops.create_or_update(rg, name, body))
    assert current is not None
    return current.id or ""


def ensure_avset(arm: Arm, spec: LaunchSpec, ppg_id: str) -> str:
    """The id of an InfiniBand gang's availability set, PUT when missing (providers.azure.placement)."""
    rg, ops = arm.rg, arm.compute().availability_sets
    name = placement.avset_name(spec.owner, spec.gang)
    current: cm.AvailabilitySet | None = arm.absent_ok(lambda: ops.get(rg, name))
    if current is None:
        body = placement.avset_body(spec.offer.region, ppg_id=ppg_id, owner=spec.owner, gang=spec.gang,
                                    launch_id=spec.launch_id)
        current = arm.call(lambda: ops.create_or_update(rg, name, body))
    assert current is not None
    return current.id or ""


def ensure_nsg(arm: Arm, owner: str, region: str) -> nm.NetworkSecurityGroup:
    """The owner's shared SSH NSG in ``region``: PUT only when missing or its rules differ."""
    rg, ops = arm.rg, arm.network().network_security_groups
    name = network.nsg_name(owner, region)
    cidrs = arm.settings.ssh_ingress_cidrs
    current: nm.NetworkSecurityGroup | None = arm.absent_ok(lambda: ops.get(rg, name))
    if current is not None and network.nsg_admits(current, cidrs):
        return current
    body = network.nsg_body(owner, region, cidrs)
    arm.wait(arm.call(lambda: ops.begin_create_or_update(rg, name, body)), arm.settings.create_wait_s)
    nsg: nm.NetworkSecurityGroup = arm.call(lambda: ops.get(rg, name))
    return nsg


def create_nic(arm: Arm, spec: LaunchSpec, tags: dict[str, str], *, public_ip_id: str | None,
               nsg_id: str | None) -> nm.NetworkInterface:
    rg = arm.rg
    nic_body = network.nic_body(spec.offer.region, tags, subnet_id=arm.settings.subnet_id,
                                public_ip_id=public_ip_id, nsg_id=nsg_id)
    nic_ops = arm.network().network_interfaces
    poller = arm.call(lambda: nic_ops.begin_create_or_update(rg, f"{spec.name}-nic", nic_body))
    arm.wait(poller, arm.settings.create_wait_s)
    nic: nm.NetworkInterface = arm.call(lambda: nic_ops.get(rg, f"{spec.name}-nic"))
    return nic
