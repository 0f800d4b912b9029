"""What ``launch`` inserts: the Instance resource for a LaunchSpec (machine and accelerators, boot disk, NICs,
metadata, scheduling, labels) and the insert's requestId. Pure functions on the SDK's models: only this
package's modules import it."""

from __future__ import annotations

import re
import uuid

from google.cloud import compute_v1

from providers.base import LABEL_JOB, LABEL_LAUNCH_ID, LABEL_OWNER, LaunchSpec, Market

from . import network, placement
from .machines import machine_shape
from .settings import Settings

#: uuid5 namespace for insert requestIds: the same launch id always yields the same requestId.
REQUEST_ID_NAMESPACE = uuid.UUID("6b1d3c1e-2f4a-5c7d-9e8f-0a1b2c3d4e5f")


def request_id(launch_id: str) -> str:
    """The insert requestId for a launch: a UUID, the same on every retry of the same launch."""
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, launch_id))


def label_value(value: str) -> str:
    """A GCE label value: lowercase letters, digits, '-' and '_', at most 63 characters."""
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]


#: settings.image as GCE names it: (its project, or None for the VM's own; "family/F" or the image's name).
_IMAGE_REF = re.compile(r"^(?:https://(?:www|compute)\.googleapis\.com/compute/(?:v1|beta|alpha)/)?"
                        r"(?:projects/(?P<project>[^/]+)/)?global/images/(?P<key>(?:family/)?[^/]+)$")


def image_ref(image: str) -> tuple[str | None, str] | None:
    """``projects/P/global/images/family/F`` -> ("P", "family/F"); None for a form GCE would refuse."""
    m = _IMAGE_REF.match(image)
    return (m.group("project"), m.group("key")) if m else None


def instance_body(settings: Settings, spec: LaunchSpec, zone: str, *, placement_policy: str | None = None,
                  image_gb: int = 0) -> compute_v1.Instance:
    """The Instance resource ``launch`` inserts for ``spec`` in ``zone`` under ``settings``:
    in ``placement_policy`` (the gang's compact placement policy) when given, and with the GPU NICs
    of GPUDirect-TCPX for a multi-node A3 High gang (providers/gcp/placement.py). ``image_gb``: the boot image's
    diskSizeGb; the job's disk is the least it gets, and GCE refuses a boot disk smaller than its image."""
    machine, accelerator, count = machine_shape(spec.offer.instance_type)
    labels = {LABEL_LAUNCH_ID: label_value(spec.launch_id), LABEL_OWNER: label_value(spec.owner),
              LABEL_JOB: label_value(spec.job)}
    # The DL VM image installs the NVIDIA driver at first boot when asked; a machine with no GPU has none to drive.
    items = [compute_v1.Items(key="install-nvidia-driver", value="True")] if spec.offer.gpu_count else []
    if spec.startup_script:
        items.append(compute_v1.Items(key="startup-script", value=spec.startup_script))
    if spec.ssh_public_key:
        items.append(compute_v1.Items(key="ssh-keys", value=f"{settings.ssh_user}:{spec.ssh_public_key}"))
    # GPU VMs cannot live-migrate: GCE requires onHostMaintenance TERMINATE for every one of them.
    if spec.offer.market is Market.SPOT:
        scheduling = compute_v1.Scheduling(
            provisioning_model="SPOT", instance_termination_action=settings.spot_termination_action,
            automatic_restart=False, on_host_maintenance="TERMINATE")
    else:
        scheduling = compute_v1.Scheduling(
            provisioning_model="STANDARD", automatic_restart=True, on_host_maintenance="TERMINATE")
    nic = compute_v1.NetworkInterface(network=settings.network)
    if settings.subnetwork:
        nic.subnetwork = settings.subnetwork
    if settings.external_ip:
        nic.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
    gpu_nics: list[compute_v1.NetworkInterface] = []
    if placement.uses_tcpx(spec.offer.instance_type, gang=spec.gang):
        nic.nic_type = "GVNIC"   # GCE requires gVNIC on every NIC of a multi-NIC A3 VM
        gpu_nics = placement.tcpx_interfaces(list(settings.gpu_networks))
    body = compute_v1.Instance(
        name=spec.name,
        machine_type=f"zones/{zone}/machineTypes/{machine}",
        labels=labels,
        disks=[compute_v1.AttachedDisk(
            boot=True, auto_delete=True, type_="PERSISTENT",
            initialize_params=compute_v1.AttachedDiskInitializeParams(
                # The boot image (a GPU-ready DL VM); spec.image is the job's container, run on it by docker.
                source_image=settings.image,
                disk_size_gb=max(spec.disk_size(settings.disk_gb), image_gb),
                disk_type=f"zones/{zone}/diskTypes/{settings.disk_type}", labels=labels))],
        network_interfaces=[nic, *gpu_nics],
        metadata=compute_v1.Metadata(items=items),
        scheduling=scheduling,
        tags=compute_v1.Tags(items=[network.network_tag(spec.owner)]),
    )
    if settings.service_account:
        body.service_accounts = [compute_v1.ServiceAccount(email=settings.service_account,
                                                           scopes=list(settings.service_account_scopes))]
    if placement_policy:
        body.resource_policies = [placement_policy]
    if accelerator:
        body.guest_accelerators = [compute_v1.AcceleratorConfig(
            accelerator_type=f"zones/{zone}/acceleratorTypes/{accelerator}", accelerator_count=count)]
    return body
