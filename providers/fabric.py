"""RDMA fabrics between machines (InfiniBand, EFA, RoCE): which instance types have one, and what it takes.

NCCL's InfiniBand transport (IB verbs) serves InfiniBand and RoCE; AWS's EFA is reached through the
aws-ofi-nccl plugin instead. A fabric helps a multi-node job only when every machine is attached to the
same one, and on the clouds that is something the launch must arrange. orch arranges it for a multi-node
gang (``ATTACHED``), and the machine's ``Instance.fabric`` says so, so the startup script points NCCL at it:

* AWS EFA: ``interfaces`` EFA network interfaces (one per network card) in one cluster placement group
  (providers/aws/fabric.py); NCCL through aws-ofi-nccl (FI_PROVIDER=efa).
* Azure InfiniBand (ND sizes): one availability set inside the gang's proximity placement group, on the HPC
  image with the IB drivers (providers/azure/placement.py); NCCL's IB transport left on.
* GCP GPUDirect-TCPX (A3 High): four extra gVNIC NICs on the configured GPU networks, in one compact
  placement policy (providers/gcp/placement.py); NCCL pointed at the TCPX plugin's NICs.

GCP's RDMA types (A3 Ultra, RoCE) orch does not attach yet: ``Instance.fabric`` stays None, NCCL stays on
TCP sockets, and the planner says so to whoever picks such a type for a multi-node job. Machines you own
declare their fabric in the SSH provider's settings (``infiniband: true``), and that one is real.

Sources (the providers' own pages):
* AWS EFA: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types (supported types);
  an EFA is a network interface of type ``efa`` given at launch, ideally in a cluster placement group.
* Azure ND A100 v4 / NDm A100 v4 (200 Gb/s HDR InfiniBand per GPU) and ND H100 v5 (400 Gb/s NDR per GPU):
  https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/nda100v4-series,
  .../ndma100v4-series, .../ndh100v5-series; VMs share an InfiniBand fabric only when placed together
  (one scale set or availability set): https://learn.microsoft.com/azure/virtual-machines/setup-infiniband
* GCP A3 High (a3-highgpu-8g): GPUDirect-TCPX over four extra 200 Gb/s NICs (800 Gb/s for GPU traffic):
  https://cloud.google.com/compute/docs/gpus/gpudirect
* Bandwidths: AWS p4d/p4de 400 Gb/s, p5/p5en 3200 Gb/s (the instance type pages); Azure ND A100 v4 8x200
  Gb/s, ND H100 v5 8x400 Gb/s (the pages above).
* GCP A3 Ultra (a3-ultragpu-8g): H200s each with a ConnectX-7 NIC, GPUDirect RDMA over RoCE, on extra RDMA
  network interfaces: https://cloud.google.com/compute/docs/gpus#a3-series and the Cluster Toolkit v1.44.1
  release notes (github.com/GoogleCloudPlatform/cluster-toolkit/releases/tag/v1.44.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["FABRICS", "Fabric", "FabricFact", "FabricSetup", "FabricWant", "attached_fabric", "fabric_label",
           "fabric_note", "fabric_shortfall", "instance_fabric", "setup_missing", "setup_needed"]


class Fabric(StrEnum):
    INFINIBAND = "infiniband"
    EFA = "efa"
    ROCE = "roce"
    GPUDIRECT_TCPX = "gpudirect-tcpx"   # GCP A3 High: extra NICs, GPU memory to NIC over TCP (no RDMA)

    @property
    def ib_verbs(self) -> bool:
        """NCCL reaches it through its InfiniBand transport (so NCCL_IB_DISABLE must stay off)."""
        return self in (Fabric.INFINIBAND, Fabric.ROCE)


@dataclass(frozen=True, slots=True)
class FabricFact:
    """An instance type's fabric, what a launch must do to be on it, and (EFA) how many interfaces."""

    fabric: Fabric
    attach: str
    interfaces: int = 0
    #: The machine's node-to-node bandwidth on that fabric, Gbit/s (the provider's published figure).
    gbps: int = 0


_EFA = "an EFA network interface at launch (and a cluster placement group)"
_AZURE_IB = "the VMs placed together in one availability set (or scale set) on the HPC image"
_GCP_RDMA = "RDMA network interfaces on an RDMA VPC at launch"
_GCP_TCPX = "four extra GPU network interfaces on their own VPCs at launch and the TCPX NCCL plugin"

FABRICS: dict[tuple[str, str], FabricFact] = {
    # EfaInfo.MaximumEfaInterfaces (DescribeInstanceTypes): one per network card.
    ("aws", "p4d.24xlarge"): FabricFact(Fabric.EFA, _EFA, interfaces=4, gbps=400),
    ("aws", "p4de.24xlarge"): FabricFact(Fabric.EFA, _EFA, interfaces=4, gbps=400),
    ("aws", "p5.48xlarge"): FabricFact(Fabric.EFA, _EFA, interfaces=32, gbps=3200),
    ("aws", "p5en.48xlarge"): FabricFact(Fabric.EFA, _EFA, interfaces=16, gbps=3200),
    ("azure", "Standard_ND96asr_v4"): FabricFact(Fabric.INFINIBAND, _AZURE_IB, gbps=1600),
    ("azure", "Standard_ND96amsr_A100_v4"): FabricFact(Fabric.INFINIBAND, _AZURE_IB, gbps=1600),
    ("azure", "Standard_ND96isr_H100_v5"): FabricFact(Fabric.INFINIBAND, _AZURE_IB, gbps=3200),
    ("gcp", "a3-highgpu-8g"): FabricFact(Fabric.GPUDIRECT_TCPX, _GCP_TCPX, gbps=800),
    ("gcp", "a3-ultragpu-8g"): FabricFact(Fabric.ROCE, _GCP_RDMA, gbps=3200),
}


def instance_fabric(provider: str, instance_type: str) -> FabricFact | None:
    """The fabric the provider documents for this instance type, or None when it documents none we know."""
    return FABRICS.get((provider, instance_type))


#: The (provider, fabric) pairs orch's own launch attaches to a multi-node gang (the rest it only reports).
ATTACHED: frozenset[tuple[str, Fabric]] = frozenset({
    ("aws", Fabric.EFA), ("azure", Fabric.INFINIBAND), ("gcp", Fabric.GPUDIRECT_TCPX)})

#: What the user must have configured for orch to attach a provider's fabric (said by ``orch plan``).
NEEDS: dict[tuple[str, Fabric], str] = {
    ("gcp", Fabric.GPUDIRECT_TCPX): "providers.gcp.gpu_networks: four VPC networks for the GPU NICs",
}


@runtime_checkable
class FabricSetup(Protocol):
    """A provider's validated settings that name what attaching a fabric takes (``NEEDS``): the GCP settings'
    ``gpu_networks`` for GPUDirect-TCPX (providers/gcp/settings.py)."""

    def fabric_ready(self, fabric: Fabric) -> bool:
        """Whether these settings name what orch needs to attach ``fabric`` at launch."""
        ...


def setup_needed(provider: str, instance_type: str, nodes: int) -> str | None:
    """What the provider's settings must name for orch to attach the fabric a gang of ``nodes`` machines of
    this type is launched on (``NEEDS``), or None when the launch needs nothing from them."""
    fabric = attached_fabric(provider, instance_type, nodes)
    return None if fabric is None else NEEDS.get((provider, fabric))


def setup_missing(provider: str, instance_type: str, nodes: int, settings: BaseModel | None) -> str | None:
    """What the provider's validated settings (its ``Settings``; None: none given) lack for orch to attach the
    fabric a gang of ``nodes`` machines of this type is launched on, or None. Settings that are no
    ``FabricSetup`` name nothing. The launch refuses such a gang; ``orch plan`` and ``orch apply`` say so before
    anything is launched (orchestrator/app/preflight.py)."""
    need = setup_needed(provider, instance_type, nodes)
    fabric = attached_fabric(provider, instance_type, nodes)
    if need is None or fabric is None:
        return None
    if isinstance(settings, FabricSetup) and settings.fabric_ready(fabric):
        return None
    return f"{instance_type} on several nodes needs {need}"


def attached_fabric(provider: str, instance_type: str, nodes: int) -> Fabric | None:
    """The fabric a machine of this type will be on as orch launches it for a job of ``nodes`` machines:
    known before the launch (the boot script is rendered first), None for plain Ethernet/TCP."""
    fact = instance_fabric(provider, instance_type)
    if nodes < 2 or fact is None or (provider, fact.fabric) not in ATTACHED:
        return None
    return fact.fabric


def fabric_note(provider: str, instance_type: str, nodes: int) -> str | None:
    """What ``orch plan`` says about the link between the machines of a multi-node job (None: one node)."""
    if nodes < 2:
        return None
    attached = attached_fabric(provider, instance_type, nodes)
    fact = instance_fabric(provider, instance_type)
    if attached is not None and fact is not None:
        need = NEEDS.get((provider, attached))
        return (f"{instance_type}: the nodes talk over {attached.value}: orch launches them with {fact.attach}, "
                "and points NCCL at it" + (f" (needs {need})" if need else ""))
    if fact is not None:
        return (f"{instance_type} reaches {fact.fabric.value} between machines only with {fact.attach}, which "
                "orch's launch does not set up: NCCL runs over TCP between the nodes (plain TCP: slow for "
                "multi-node training)")
    return (f"{instance_type}: no RDMA fabric between machines known: NCCL runs over TCP between the nodes "
            "(plain TCP: slow for multi-node training)")


def fabric_label(provider: str, instance_type: str, nodes: int) -> str:
    """The node-to-node link of an offer in a few characters (``orch quote --wide``): ``efa 400G``,
    ``infiniband 1600G, tcp`` (a fabric orch's launch does not attach: its nodes talk TCP), ``ethernet``."""
    fact = instance_fabric(provider, instance_type)
    if fact is None:
        return "ethernet"
    label = f"{fact.fabric.value} {fact.gbps}G" if fact.gbps else fact.fabric.value
    attached = (provider, fact.fabric) in ATTACHED
    return label if attached or nodes < 2 else f"{label}, tcp"


class FabricWant(StrEnum):
    """What ``resources.fabric`` asks of a multi-node job's machines (the manifest's words)."""

    ANY = "any"                 # whatever the machines have, plain TCP included
    FAST = "fast"               # a fabric orch attaches (EFA, InfiniBand, RoCE, TCPX), not plain TCP
    INFINIBAND = "infiniband"   # one NCCL reaches through IB verbs (InfiniBand or RoCE)


def fabric_shortfall(provider: str, instance_type: str, nodes: int, wanted: FabricWant) -> str | None:
    """Why an offer does not give a job of ``nodes`` machines the fabric it asks (``resources.fabric``),
    or None when it does. One node needs none."""
    if not isinstance(wanted, FabricWant):     # decided on by member: text would pass as FAST unseen
        raise TypeError(f"wanted must be a FabricWant, not {wanted!r}")
    if wanted is FabricWant.ANY or nodes < 2:
        return None
    attached = attached_fabric(provider, instance_type, nodes)
    fact = instance_fabric(provider, instance_type)
    have = "plain TCP" if fact is None else (
        fact.fabric.value if attached is not None else f"{fact.fabric.value}, which orch does not attach yet: TCP")
    if attached is None or (wanted is FabricWant.INFINIBAND and not attached.ib_verbs):
        return f"nodes talk over {have}; resources.fabric asks {wanted.value}"
    return None
