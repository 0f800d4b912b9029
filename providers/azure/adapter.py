"""Azure Virtual Machines through azure-mgmt-compute and azure-mgmt-network.

Shape of what orch creates, per instance (all in ``settings.resource_group``, all tagged with orch's ids):
with ``public_ip``, a Standard static public IP ``<name>-pip`` and (shared per owner and region) the NSG
``orch-<owner>-ssh-<region>`` admitting the virtual network and 22 from ``ssh_ingress_cidrs`` (see
providers.azure.network); then
``<name>-nic`` in ``settings.subnet_id`` carrying both, then the VM ``<name>`` with OS disk ``<name>-osdisk``.
NIC and disk are attached with ``deleteOption: Delete`` so ARM removes them with the VM; ``terminate`` still
deletes them (and the public IP) explicitly (404/204 == success) to heal leftovers of a half-done launch.
The shared NSG is removed by garbage collection once no NIC uses it (``list_network_resources``).

Spot VMs use ``evictionPolicy: Deallocate``: an evicted VM stays visible (PowerState/deallocated), so
``get`` reports it PREEMPTED instead of vanishing; it still bills its disk until orch terminates it.
A deallocated Spot VM that orch itself stopped carries the ``orch:stopped`` tag and reads STOPPED.

The SDK's own retries are off (``retry_total=0``): providers.retry is the one retry policy.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from azure.mgmt.compute import models as cm

from providers.base import (
    TAG_OWNER,
    Capability,
    CloudResource,
    GpuRequest,
    Instance,
    InstanceState,
    LaunchSpec,
    Offer,
    Provider,
    ResourceKind,
)
from providers.errors import (
    AuthError,
    DiskBelowImageError,
    InstanceNotFoundError,
    InvalidRequestError,
    ProviderError,
    ResourceNotFoundError,
)
from providers.retry import RetryPolicy

from . import network, placement
from .arm import Arm
from .errors import AUTH_HINT
from .instances import TAG_STOPPED, to_instance
from .launch_resources import create_nic, ensure_avset, ensure_nsg, ensure_ppg, ensure_public_ip, launch_tags
from .settings import Settings
from .vm import vm_body

NAME = "azure"


class AzureProvider(Provider):
    """Azure VMs in one resource group. instance_id == VM name (== instance_name(owner, launch_id))."""

    name: ClassVar[str] = NAME
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.SPOT, Capability.STOP, Capability.TAGS, Capability.MULTI_NODE, Capability.PREEMPTION_NOTICE,
    })

    def __init__(self, settings: Settings, *, retry: RetryPolicy | None = None,
                 credential: Any = None, sleep: Callable[[float], None] | None = None) -> None:
        self.settings = settings
        self.arm = Arm(settings, retry=retry or settings.retry_policy(), credential=credential, sleep=sleep)

    def close(self) -> None:
        self.arm.close()

    # -- protocol -----------------------------------------------------------------------------------

    def check_credentials(self) -> None:
        self.arm.require_config()
        try:
            self.arm.credential().get_token("https://management.azure.com/.default")
        except Exception as exc:
            raise AuthError(f"cannot get an Azure token: {type(exc).__name__}", provider=NAME,
                            hint=AUTH_HINT) from exc
        self.arm.call(lambda: next(iter(self.arm.compute().virtual_machines.list(self.arm.rg)), None))

    def offers(self, req: GpuRequest) -> list[Offer]:
        """Catalog offers (ARM has no GPU price API; the retail prices API feeds ``orch catalog refresh``)."""
        from providers.catalog import load_catalog, match_offers

        azure_only = [o for o in load_catalog().offers if o.provider == NAME]
        return match_offers(azure_only, req)

    def launch(self, spec: LaunchSpec) -> Instance:
        """Create (or find) the VM; it carries the refreshed catalog's price at launch (Azure reports none)."""
        from dataclasses import replace

        from providers.catalog.loader import current_price_hr

        instance = self._launch(spec)
        return instance if instance.price_hr is not None else replace(instance, price_hr=current_price_hr(spec.offer))

    def _launch(self, spec: LaunchSpec) -> Instance:
        rg = self.arm.rg
        existing = self.get(spec.name)
        if existing is not None:
            return existing
        if not self.settings.subnet_id:
            raise InvalidRequestError("providers.azure.subnet_id is not set", provider=NAME,
                                      hint="the full resource id of an existing subnet for the NICs")
        tags = launch_tags(spec)
        pip = ensure_public_ip(self.arm, spec, tags) if self.settings.public_ip else None
        # With a public address the NIC always gets orch's NSG: intra-network traffic allowed, port 22 only
        # from ssh_ingress_cidrs (none by default), everything else from outside refused.
        nsg = ensure_nsg(self.arm, spec.owner, spec.offer.region) if self.settings.public_ip else None
        nic = create_nic(self.arm, spec, tags, public_ip_id=pip.id if pip else None, nsg_id=nsg.id if nsg else None)
        body = vm_body(self.settings, spec, nic_id=nic.id or "", tags=tags)
        if spec.gang:   # a multi-node gang: its VMs in one proximity placement group
            ppg_id = ensure_ppg(self.arm, spec)
            body.properties.proximity_placement_group = cm.SubResource(id=ppg_id)
            if placement.uses_infiniband(spec.offer.instance_type, gang=spec.gang):
                # One InfiniBand fabric needs one availability set (which takes no zone).
                body.properties.availability_set = cm.SubResource(id=ensure_avset(self.arm, spec, ppg_id))
                body.zones = None
        vm_ops = self.arm.compute().virtual_machines
        try:
            try:
                poller = self.arm.call(lambda: vm_ops.begin_create_or_update(rg, spec.name, body))
            except DiskBelowImageError:
                # The job's disk is under the image's own (ARM does not say the image's size before): the same VM
                # without an explicit size, which ARM makes the image's, the least disk that fits the job's.
                body.properties.storage_profile.os_disk.disk_size_gb = None
                poller = self.arm.call(lambda: vm_ops.begin_create_or_update(rg, spec.name, body))
            self.arm.wait(poller, self.settings.create_wait_s)
        except ProviderError:   # any refusal (price too low included) or failure: leave no VM, NIC or IP
            self._cleanup_failed_launch(spec.name)
            raise
        got = self.get(spec.name)
        if got is None:  # accepted but not yet readable (eventual consistency): report what we asked for
            return Instance(provider=NAME, instance_id=spec.name, launch_id=spec.launch_id, owner=spec.owner,
                            job=spec.job, state=InstanceState.PENDING, instance_type=spec.offer.instance_type,
                            region=spec.offer.region, market=spec.offer.market, raw_state="accepted",
                            ssh_user=self.settings.admin_username)
        return got

    def get(self, instance_id: str) -> Instance | None:
        rg = self.arm.rg
        vm = self.arm.absent_ok(lambda: self.arm.compute().virtual_machines.get(rg, instance_id, expand="instanceView"))
        if vm is None:
            return None
        return self._reap_failed(to_instance(vm, vm.properties.instance_view if vm.properties else None,
                                             resource_group=rg, ssh_user=self.settings.admin_username,
                                             private_ip=self._nic_ip(instance_id),
                                             public_ip=self._public_ip(instance_id)))

    def list_instances(self, owner: str) -> list[Instance]:
        rg = self.arm.rg
        vms = self.arm.call(lambda: list(self.arm.compute().virtual_machines.list(rg)))
        ips = self._nic_ips()
        public = self._public_ips()
        found: list[Instance] = []
        for vm in vms:
            if (vm.tags or {}).get(TAG_OWNER) != owner or not vm.name:
                continue
            name = vm.name
            view = self.arm.absent_ok(lambda name=name: self.arm.compute().virtual_machines.instance_view(rg, name))
            found.append(self._reap_failed(to_instance(vm, view, resource_group=rg,
                                                       ssh_user=self.settings.admin_username,
                                                       private_ip=ips.get(name), public_ip=public.get(name))))
        return found

    def _reap_failed(self, instance: Instance) -> Instance:
        """A VM whose create failed after the launch's wait (ProvisioningState/failed) reads as TERMINATED, so
        nobody else would delete it: it is deleted here, with its NIC, public IP and disk, the first time it
        is seen failed."""
        if instance.raw_state == "ProvisioningState/failed":
            self._cleanup_failed_launch(instance.instance_id)
        return instance

    def terminate(self, instance_id: str) -> None:
        rg = self.arm.rg
        vm_ops = self.arm.compute().virtual_machines
        poller = self.arm.absent_ok(lambda: vm_ops.begin_delete(rg, instance_id))
        if poller is not None:
            try:
                done = self.arm.wait(poller, self.settings.delete_wait_s)
            except InstanceNotFoundError:
                done = True
            if not done:
                return  # deleteOption=Delete removes NIC and disk when ARM finishes
        nic_ops = self.arm.network().network_interfaces
        disk_ops = self.arm.compute().disks
        nic_poller = self.arm.absent_ok(lambda: nic_ops.begin_delete(rg, network.nic_name(instance_id)))
        if nic_poller is not None:
            self.arm.wait_absent_ok(nic_poller, self.settings.delete_wait_s)
        self.arm.delete_quietly(
            lambda: self.arm.network().public_ip_addresses.begin_delete(rg, network.pip_name(instance_id)))
        self.arm.absent_ok(lambda: disk_ops.begin_delete(rg, f"{instance_id}-osdisk"))

    def stop(self, instance_id: str) -> None:
        """Deallocate (no compute billing, disk kept), after tagging it so it is not read as evicted."""
        rg = self.arm.rg
        vm_ops = self.arm.compute().virtual_machines
        vm = self.arm.call(lambda: vm_ops.get(rg, instance_id))
        tags = {**(vm.tags or {}), TAG_STOPPED: datetime.now().astimezone().isoformat(timespec="seconds")}
        update = cm.VirtualMachineUpdate(tags=tags)
        self.arm.wait(self.arm.call(lambda: vm_ops.begin_update(rg, instance_id, update)), self.settings.create_wait_s)
        self.arm.call(lambda: vm_ops.begin_deallocate(rg, instance_id))

    def list_network_resources(self, owner: str) -> list[CloudResource]:
        """This owner's public IPs, SSH NSGs and NICs in the resource group (by tag), with ``in_use``."""
        rg, net = self.arm.rg, self.arm.network()
        pips = self.arm.call(lambda: list(net.public_ip_addresses.list(rg)))
        nsgs = self.arm.call(lambda: list(net.network_security_groups.list(rg)))
        nics = self.arm.call(lambda: list(net.network_interfaces.list(rg)))
        ppgs = self.arm.call(lambda: list(self.arm.compute().proximity_placement_groups.list_by_resource_group(rg)))
        sets = self.arm.call(lambda: list(self.arm.compute().availability_sets.list(rg)))
        return (network.owned_resources(owner, pips=pips, nsgs=nsgs, nics=nics) + placement.owned_ppgs(owner, ppgs)
                + placement.owned_avsets(owner, sets))

    def delete_network_resource(self, resource: CloudResource) -> None:
        """Delete one; missing == success; ResourceInUseError while ARM says something still uses it."""
        rg, net = self.arm.rg, self.arm.network()
        if resource.kind in (ResourceKind.PLACEMENT_GROUP, ResourceKind.AVAILABILITY_SET):
            compute = self.arm.compute()
            sync = (compute.proximity_placement_groups if resource.kind is ResourceKind.PLACEMENT_GROUP
                    else compute.availability_sets)
            try:   # a synchronous delete in ARM (no long-running operation)
                self.arm.call(lambda: sync.delete(rg, resource.name))
            except ResourceNotFoundError:
                pass
            return
        deleters = {ResourceKind.PUBLIC_IP: net.public_ip_addresses, ResourceKind.NETWORK_INTERFACE:
                    net.network_interfaces, ResourceKind.NETWORK_SECURITY_GROUP: net.network_security_groups}
        ops = deleters.get(resource.kind)
        if ops is None:
            return
        try:
            poller = self.arm.call(lambda: ops.begin_delete(rg, resource.name))
            self.arm.wait(poller, self.settings.delete_wait_s)
        except ResourceNotFoundError:
            return

    # -- pieces -------------------------------------------------------------------------------------

    def _cleanup_failed_launch(self, name: str) -> None:
        """Best effort after a refused or failed create: no VM, NIC or disk left behind."""
        try:
            self.terminate(name)
        except ProviderError:
            pass  # GC finds the tagged leftovers later

    def _nic_ip(self, name: str) -> str | None:
        rg = self.arm.rg
        nic = self.arm.absent_ok(lambda: self.arm.network().network_interfaces.get(rg, f"{name}-nic"))
        return network.first_private_ip(nic) if nic is not None else None

    def _public_ip(self, name: str) -> str | None:
        if not self.settings.public_ip:
            return None
        rg = self.arm.rg
        pip = self.arm.absent_ok(lambda: self.arm.network().public_ip_addresses.get(rg, network.pip_name(name)))
        return (pip.properties.ip_address or None) if pip is not None and pip.properties else None

    def _public_ips(self) -> dict[str, str]:
        if not self.settings.public_ip:
            return {}
        rg = self.arm.rg
        return network.public_ips(self.arm.call(lambda: list(self.arm.network().public_ip_addresses.list(rg))))

    def _nic_ips(self) -> dict[str, str]:
        rg = self.arm.rg
        return network.private_ips(self.arm.call(lambda: list(self.arm.network().network_interfaces.list(rg))))
