"""Reading an ARM VM back as orch's ``Instance``: its state from provisioningState and PowerState/*, and the
tags orch set on it. Pure functions (the SDK's models are only named in annotations)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from providers.base import TAG_JOB, TAG_LAUNCH_ID, TAG_OWNER, Instance, InstanceState, Market
from providers.fabric import Fabric

if TYPE_CHECKING:
    from azure.mgmt.compute import models as cm

NAME = "azure"
TAG_FABRIC = "orch:fabric"            # set on a VM launched onto the InfiniBand fabric (an ND gang)
TAG_STOPPED = "orch:stopped"          # set by ``stop`` so a deallocated Spot VM is not read as evicted
EVICTION_REASON = "Azure eviction: Spot VM deallocated by the platform"


#: Azure's own table of power states and billing (learn.microsoft.com/azure/virtual-machines/states-billing):
#: Starting, Running, Stopping and Stopped (allocated on a host) are billed for instance usage; Deallocating and
#: Deallocated are not. ``map_state`` folds Starting into PENDING and Stopping/Stopped into STOPPING/STOPPED,
#: states other clouds do not bill in, so the VM says it itself (``Instance.billing``).
_BILLED_POWER = frozenset({"starting", "running", "stopping", "stopped"})
_UNBILLED_POWER = frozenset({"deallocating", "deallocated"})


def _lower(value: Any) -> str:
    """Lower-case text of an ARM string or SDK enum (whose str() is its class-qualified name)."""
    if value is None:
        return ""
    return str(getattr(value, "value", value)).lower()


def map_state(provisioning_state: str | None, power_state: str | None, *, spot: bool,
              stopped_by_orch: bool, failure: str | None = None) -> tuple[InstanceState, str, str | None]:
    """(state, raw_state, raw_reason) from ARM's provisioningState and the instance view's PowerState/*.

    ``power_state`` is the part after ``PowerState/`` (running, deallocated, ...); ``failure`` is the
    message of a ``ProvisioningState/failed/*`` status, if any.
    """
    prov = _lower(provisioning_state)
    power = _lower(power_state)
    raw = f"PowerState/{power}" if power else f"ProvisioningState/{prov or 'unknown'}"
    if prov == "deleting":
        return InstanceState.STOPPING, "ProvisioningState/deleting", None
    if prov == "creating":
        return InstanceState.PENDING, raw, None
    if power == "running":
        return InstanceState.RUNNING, raw, failure
    if power == "unknown":  # the platform lost the VM's power state (host trouble): not gone, may come back
        return InstanceState.UNREACHABLE, raw, None
    if power == "starting":
        return InstanceState.PENDING, raw, None
    if power in ("stopping", "deallocating"):
        return InstanceState.STOPPING, raw, None
    if power == "deallocated" and spot and not stopped_by_orch:
        return InstanceState.PREEMPTED, raw, EVICTION_REASON
    if power in ("stopped", "deallocated"):
        return InstanceState.STOPPED, raw, None
    if prov == "failed":
        return InstanceState.TERMINATED, "ProvisioningState/failed", failure or "provisioning failed"
    return InstanceState.PENDING, raw, None


def billing(provisioning_state: str | None, power_state: str | None) -> bool | None:
    """Whether Azure bills the VM's compute in this state, by its own table (None: it does not say, and orch's
    default for the mapped state holds: the VM still being created, or being deleted)."""
    prov, power = _lower(provisioning_state), _lower(power_state)
    if prov in ("creating", "deleting"):
        return None
    if power in _BILLED_POWER:
        return True
    return False if power in _UNBILLED_POWER else None


def to_instance(vm: cm.VirtualMachine, view: cm.VirtualMachineInstanceView | None, *, resource_group: str,
                ssh_user: str, private_ip: str | None, public_ip: str | None = None) -> Instance:
    """``vm`` (and its instance view, whose statuses carry PowerState/* and a failed provisioning's message)
    as an Instance in ``resource_group``, reached as ``ssh_user``."""
    props = vm.properties
    tags = vm.tags or {}
    power: str | None = None
    failure: str | None = None
    prov = props.provisioning_state if props else None
    for status in (view.statuses if view and view.statuses else []):
        code = status.code or ""
        if code.startswith("PowerState/"):
            power = code.split("/", 1)[1]
        elif code.lower().startswith("provisioningstate/"):
            parts = code.split("/")
            if prov is None:
                prov = parts[1] if len(parts) > 1 else None
            if len(parts) > 2 and parts[1].lower() == "failed":
                failure = f"{parts[2]}: {status.message or status.display_status or ''}".strip()
    spot = _lower(props.priority if props else None) == "spot"
    state, raw_state, reason = map_state(prov, power, spot=spot, stopped_by_orch=TAG_STOPPED in tags,
                                         failure=failure)
    size = props.hardware_profile.vm_size if props and props.hardware_profile else ""
    extra: tuple[tuple[str, str], ...] = (("resource_group", resource_group),)
    if props and props.vm_id:
        extra += (("vm_id", props.vm_id),)
    return Instance(
        provider=NAME,
        instance_id=vm.name or "",
        launch_id=tags.get(TAG_LAUNCH_ID),
        owner=tags.get(TAG_OWNER),
        job=tags.get(TAG_JOB),
        state=state,
        instance_type=str(getattr(size, "value", size) or ""),
        region=vm.location or "",
        zone=(vm.zones or [None])[0],
        market=Market.SPOT if spot else Market.ON_DEMAND,
        raw_state=raw_state,
        raw_reason=reason,
        private_ip=private_ip,
        public_ip=public_ip,
        ssh_user=ssh_user,
        created_at=props.time_created if props else None,
        extra=extra,
        fabric=Fabric.INFINIBAND if tags.get(TAG_FABRIC) == Fabric.INFINIBAND.value else None,
        billing=billing(prov, power),
    )
