"""EFA on a multi-node gang: the network interfaces RunInstances is given for an EFA instance type.

A gang of more than one node on a type the fabric table (providers/fabric.py) lists as EFA is launched
with one EFA interface per network card, ``InterfaceType: efa`` (EFA with ENA: it also carries IP, so the
primary interface can be one), card 0 device 0 first, then device 0 of each further card, each in orch's
security group (whose self rule admits the gang: EFA traffic must be allowed by a rule naming the group
itself) and in the configured subnet (else the default subnet of the placement's zone). EC2 does not give
an instance with more than one interface a public address, so such nodes reach the store through the
VPC (a NAT gateway or an S3 gateway endpoint: docs/providers/aws.md). The instance is tagged
``orch:fabric=efa`` so that reading it back says which fabric it was launched on.
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html
"""

from __future__ import annotations

from typing import Any

from providers.fabric import Fabric, instance_fabric

TAG_FABRIC = "orch:fabric"


def efa_interface_count(instance_type: str, *, gang: str) -> int:
    """How many EFA interfaces a launch of ``instance_type`` gets: none for a single node or a type
    without EFA, else one per network card."""
    fact = instance_fabric("aws", instance_type)
    if not gang or fact is None or fact.fabric is not Fabric.EFA:
        return 0
    return max(fact.interfaces, 1)


def efa_interfaces(count: int, *, groups: list[str], subnet_id: str | None) -> list[dict[str, Any]]:
    """The ``NetworkInterfaces`` of RunInstances for ``count`` EFA interfaces (one per network card)."""
    out: list[dict[str, Any]] = []
    for card in range(count):
        nic: dict[str, Any] = {"NetworkCardIndex": card, "DeviceIndex": 0, "InterfaceType": "efa",
                               "DeleteOnTermination": True, "Groups": list(groups)}
        if subnet_id:
            nic["SubnetId"] = subnet_id
        out.append(nic)
    return out


def launched_fabric(tags: dict[str, str], interfaces: list[dict[str, Any]]) -> Fabric | None:
    """The fabric an instance was launched on: EFA when an interface is of type efa (what EC2 reports) or
    orch tagged it so (an emulator that keeps no interface type)."""
    if tags.get(TAG_FABRIC) == Fabric.EFA.value or any(
            i.get("InterfaceType") in ("efa", "efa-only") for i in interfaces):
        return Fabric.EFA
    return None
