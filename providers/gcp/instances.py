"""Reading a GCE instance back as orch's ``Instance``: ids ``<zone>/<name>``, GCE's status mapped to orch's
states (a spot VM GCE preempted reads PREEMPTED), the labels orch set, the catalog's instance type and the
GPUDirect-TCPX fabric. Pure functions on the SDK's models: only this package's modules import it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from google.cloud import compute_v1

from providers.base import LABEL_JOB, LABEL_LAUNCH_ID, LABEL_OWNER, Instance, InstanceState, Market
from providers.errors import InstanceNotFoundError
from providers.fabric import Fabric

from . import placement
from .machines import catalog_type

PREEMPTED_OPERATION = "compute.instances.preempted"

_STATES = {
    "PROVISIONING": InstanceState.PENDING, "STAGING": InstanceState.PENDING, "PENDING": InstanceState.PENDING,
    "REPAIRING": InstanceState.UNREACHABLE,   # "The instance is in repair": unusable now, may come back
    "RUNNING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING, "SUSPENDING": InstanceState.STOPPING,
    "PENDING_STOP": InstanceState.STOPPING, "DEPROVISIONING": InstanceState.STOPPING,
    "STOPPED": InstanceState.STOPPED, "SUSPENDED": InstanceState.STOPPED,
    "TERMINATED": InstanceState.STOPPED,   # GCE's word for a stopped VM (disk kept); deleted VMs are 404
}


def split_instance_id(instance_id: str) -> tuple[str, str]:
    zone, sep, name = instance_id.partition("/")
    if not sep or not zone or not name or "/" in name:
        raise InstanceNotFoundError(f"not an orch GCP instance id (zone/name): {instance_id!r}", provider="gcp")
    return zone, name


def to_instance(raw: compute_v1.Instance, *, ssh_user: str,
                was_preempted: Callable[[str, compute_v1.Instance], bool]) -> Instance:
    """``raw`` as an Instance reached as ``ssh_user``. A stopped (TERMINATED) spot VM is PREEMPTED when
    ``was_preempted(zone, raw)`` finds GCE's preemption operation for it (asked only then)."""
    labels = dict(raw.labels)
    zone = raw.zone.rsplit("/", 1)[-1]
    market = (Market.SPOT if raw.scheduling.provisioning_model == "SPOT" or raw.scheduling.preemptible
              else Market.ON_DEMAND)
    state = _STATES.get(raw.status, InstanceState.PENDING)
    reason: str | None = raw.status_message or None
    if raw.status == "TERMINATED" and market is Market.SPOT and was_preempted(zone, raw):
        state, reason = InstanceState.PREEMPTED, PREEMPTED_OPERATION
    nic = raw.network_interfaces[0] if raw.network_interfaces else None
    public_ip = nic.access_configs[0].nat_i_p if nic and nic.access_configs else None
    created = datetime.fromisoformat(raw.creation_timestamp) if raw.creation_timestamp else None
    machine = raw.machine_type.rsplit("/", 1)[-1]
    # The GPU NICs are what put a VM on GPUDirect-TCPX: a gang's A3 High VM has them, a single one not.
    tcpx = placement.tcpx_type(machine) and len(raw.network_interfaces) > placement.TCPX_GPU_NICS
    return Instance(
        provider="gcp", instance_id=f"{zone}/{raw.name}", launch_id=labels.get(LABEL_LAUNCH_ID),
        owner=labels.get(LABEL_OWNER), job=labels.get(LABEL_JOB), state=state,
        instance_type=catalog_type(machine, list(raw.guest_accelerators)),
        region=zone.rsplit("-", 1)[0], zone=zone, market=market, raw_state=raw.status, raw_reason=reason,
        public_ip=public_ip or None, private_ip=(nic.network_i_p or None) if nic else None,
        ssh_user=ssh_user, created_at=created, fabric=Fabric.GPUDIRECT_TCPX if tcpx else None,
    )
