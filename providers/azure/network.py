"""What orch creates in Azure's network so SSH reaches a VM, and how its leftovers are recognised.

Per VM (with ``public_ip: true``): a Standard, static public IP ``<vm>-pip`` on the VM's NIC, tagged like
the VM, deleted by ``terminate`` after the NIC. Per resource group, owner and region (shared by that
owner's NICs there): a network security group ``orch-<owner>-ssh-<region>``, tagged ``orch:owner``, whose
rules admit all traffic from inside the virtual network (``orch-intra``: a gang's nodes reach each other;
said explicitly rather than left to the default ``AllowVnetInBound``, so that it shows and outranks any
rule orch's settings add) and TCP 22 from ``ssh_ingress_cidrs`` only (one rule per address family: an NSG
rule does not mix IPv4 and IPv6 prefixes; none by default). ARM refuses to delete an NSG a NIC still uses,
so it is removed by garbage collection once no NIC holds it. A Standard public IP admits nothing without an
NSG rule (secure by default): with ``ssh_ingress_cidrs: []`` the VM has an address but no inbound port from
outside the virtual network.

Pure functions only (names, bodies, and reading listings into addresses and ``CloudResource``); the
adapter and providers.azure.launch_resources call ARM.
"""

from __future__ import annotations

from typing import Any

from azure.mgmt.network import models as nm

from providers.base import TAG_LAUNCH_ID, TAG_OWNER, CloudResource, ResourceKind

SSH_PORT = "22"
SSH_RULE_PRIORITY = 1000
INTRA_RULE = "orch-intra"
INTRA_RULE_PRIORITY = 900
#: Azure's service tag for the virtual network's own address space (and networks peered with it).
VNET_TAG = "VirtualNetwork"
TAG_ROLE = "orch:role"
ROLE_SSH = "ssh-ingress"


def pip_name(vm_name: str) -> str:
    return f"{vm_name}-pip"


def nic_name(vm_name: str) -> str:
    return f"{vm_name}-nic"


def nsg_name(owner: str, region: str) -> str:
    return f"orch-{owner}-ssh-{region}"


def public_ip_body(location: str, tags: dict[str, str]) -> nm.PublicIPAddress:
    """A Standard, static IPv4 address that goes with the VM (deleteOption Delete where ARM honours it)."""
    return nm.PublicIPAddress(
        location=location, tags=tags, sku=nm.PublicIPAddressSku(name="Standard", tier="Regional"),
        properties=nm.PublicIPAddressPropertiesFormat(public_ip_allocation_method="Static",
                                                      public_ip_address_version="IPv4", delete_option="Delete"))


def nic_body(location: str, tags: dict[str, str], *, subnet_id: str | None, public_ip_id: str | None,
             nsg_id: str | None) -> nm.NetworkInterface:
    """The VM's NIC in ``subnet_id`` (dynamic private address), carrying its public IP and NSG when given."""
    return nm.NetworkInterface(
        location=location,
        tags=tags,
        properties=nm.NetworkInterfacePropertiesFormat(
            ip_configurations=[
                nm.NetworkInterfaceIPConfiguration(
                    name="ipconfig1",
                    properties=nm.NetworkInterfaceIPConfigurationPropertiesFormat(
                        subnet=nm.Subnet(id=subnet_id),
                        private_ip_allocation_method="Dynamic",
                        public_ip_address=nm.PublicIPAddress(id=public_ip_id) if public_ip_id else None,
                    ),
                ),
            ],
            network_security_group=nm.NetworkSecurityGroup(id=nsg_id) if nsg_id else None,
        ),
    )


def _ssh_rules(cidrs: list[str]) -> list[nm.SecurityRule]:
    families = [("orch-ssh", [c for c in cidrs if ":" not in c]), ("orch-ssh-v6", [c for c in cidrs if ":" in c])]
    return [nm.SecurityRule(name=name, properties=nm.SecurityRulePropertiesFormat(
        description="orch: SSH to the machines orch launches", protocol="Tcp", source_port_range="*",
        destination_port_range=SSH_PORT, source_address_prefixes=prefixes, destination_address_prefix="*",
        access="Allow", priority=SSH_RULE_PRIORITY + i, direction="Inbound"))
        for i, (name, prefixes) in enumerate(families) if prefixes]


def _intra_rule() -> nm.SecurityRule:
    return nm.SecurityRule(name=INTRA_RULE, properties=nm.SecurityRulePropertiesFormat(
        description="orch: the machines orch launches reach each other inside the virtual network",
        protocol="*", source_port_range="*", destination_port_range="*", source_address_prefix=VNET_TAG,
        destination_address_prefix=VNET_TAG, access="Allow", priority=INTRA_RULE_PRIORITY, direction="Inbound"))


def _rules(cidrs: list[str]) -> list[nm.SecurityRule]:
    return [_intra_rule(), *_ssh_rules(cidrs)]


def nsg_body(owner: str, location: str, cidrs: list[str]) -> nm.NetworkSecurityGroup:
    return nm.NetworkSecurityGroup(
        location=location, tags={TAG_OWNER: owner, TAG_ROLE: ROLE_SSH},
        properties=nm.NetworkSecurityGroupPropertiesFormat(security_rules=_rules(cidrs)))


def nsg_admits(nsg: nm.NetworkSecurityGroup, cidrs: list[str]) -> bool:
    """Whether ``nsg`` already carries exactly orch's rules for ``cidrs`` (so no PUT is needed)."""
    have = {r.name: sorted(r.properties.source_address_prefixes or [])
            for r in (nsg.properties.security_rules if nsg.properties else None) or [] if r.properties}
    want = {r.name: sorted(r.properties.source_address_prefixes or []) for r in _rules(cidrs) if r.properties}
    return have == want


def first_private_ip(nic: nm.NetworkInterface) -> str | None:
    configs = nic.properties.ip_configurations if nic.properties and nic.properties.ip_configurations else []
    for cfg in configs:
        if cfg.properties and cfg.properties.private_ip_address:
            return str(cfg.properties.private_ip_address)
    return None


def private_ips(nics: list[nm.NetworkInterface]) -> dict[str, str]:
    """VM name -> private address, from a listing of ``<vm>-nic`` NICs."""
    ips: dict[str, str] = {}
    for nic in nics:
        ip = first_private_ip(nic)
        if nic.name and nic.name.endswith("-nic") and ip:
            ips[nic.name[: -len("-nic")]] = ip
    return ips


def public_ips(pips: list[nm.PublicIPAddress]) -> dict[str, str]:
    """VM name -> public address, from a listing of ``<vm>-pip`` public IPs."""
    return {p.name[: -len("-pip")]: p.properties.ip_address for p in pips
            if p.name and p.name.endswith("-pip") and p.properties and p.properties.ip_address}


def _tags(resource: Any) -> dict[str, str]:
    return dict(resource.tags or {})


def owned_resources(owner: str, *, pips: list[nm.PublicIPAddress], nsgs: list[nm.NetworkSecurityGroup],
                    nics: list[nm.NetworkInterface]) -> list[CloudResource]:
    """This owner's public IPs, SSH NSGs and NICs (by tag), each with whether ARM shows it attached."""
    out: list[CloudResource] = []
    for pip in pips:
        if _tags(pip).get(TAG_OWNER) == owner:
            out.append(_resource(ResourceKind.PUBLIC_IP, pip, owner,
                                 in_use=bool(pip.properties and pip.properties.ip_configuration)))
    for nsg in nsgs:
        tags = _tags(nsg)
        if tags.get(TAG_OWNER) == owner and tags.get(TAG_ROLE) == ROLE_SSH:
            used = bool(nsg.properties and (nsg.properties.network_interfaces or nsg.properties.subnets))
            out.append(_resource(ResourceKind.NETWORK_SECURITY_GROUP, nsg, owner, in_use=used))
    for nic in nics:
        if _tags(nic).get(TAG_OWNER) == owner:
            out.append(_resource(ResourceKind.NETWORK_INTERFACE, nic, owner,
                                 in_use=bool(nic.properties and nic.properties.virtual_machine)))
    return out


def _resource(kind: ResourceKind, res: Any, owner: str, *, in_use: bool) -> CloudResource:
    # ARM reports no creation time on these resources: the collector's first sighting dates them.
    return CloudResource(provider="azure", kind=kind, resource_id=res.id or "", name=res.name or "", owner=owner,
                         in_use=in_use, launch_id=_tags(res).get(TAG_LAUNCH_ID), region=res.location)
