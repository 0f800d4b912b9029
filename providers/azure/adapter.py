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

import base64
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from azure.core.credentials import AccessToken
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.pipeline import PipelineRequest
from azure.core.pipeline.policies import SansIOHTTPPolicy
from azure.core.polling import LROPoller
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute import models as cm
from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.network import models as nm

from providers.base import (
    TAG_JOB,
    TAG_LAUNCH_ID,
    TAG_OWNER,
    Capability,
    CloudResource,
    GpuRequest,
    Instance,
    InstanceState,
    LaunchSpec,
    Market,
    Offer,
    Provider,
    ResourceKind,
)
from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    PriceTooLowError,
    ProviderError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
    ResourceInUseError,
    ResourceNotFoundError,
)
from providers.fabric import Fabric
from providers.retry import RetryPolicy, call_with_retry

from . import network, placement
from .settings import Settings

NAME = "azure"
TAG_FABRIC = "orch:fabric"            # set on a VM launched onto the InfiniBand fabric (an ND gang)
TAG_STOPPED = "orch:stopped"          # set by ``stop`` so a deallocated Spot VM is not read as evicted
EVICTION_REASON = "Azure eviction: Spot VM deallocated by the platform"
AUTH_HINT = "run `az login` or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET"

T = TypeVar("T")

_CAPACITY_CODES = frozenset({
    "skunotavailable", "allocationfailed", "zonalallocationfailed", "overconstrainedallocationrequest",
    "overconstrainedzonalallocationrequest",
})
_QUOTA_CODES = frozenset({"operationnotallowed", "quotaexceeded"})
# Azure's Spot refusal when billingProfile.maxPrice is below the size's current Spot price ("Unable to perform
# operation ... since the provided maximum price ... USD is lower than the current spot price ...": learn.microsoft
# .com/azure/virtual-machines/error-codes-spot). A higher max price (or -1) may succeed: move on, do not retry.
_PRICE_CODES = frozenset({"spotpricegreaterthanprovidedmaxprice"})
_THROTTLE_CODES = frozenset({"toomanyrequests", "throttled"})
_AUTH_CODES = frozenset({
    "authorizationfailed", "invalidauthenticationtoken", "authenticationfailed", "expiredauthenticationtoken",
    "invalidauthenticationtokentenant", "linkedauthorizationfailed",
})
_NOT_FOUND_CODES = frozenset({"resourcenotfound", "notfound", "resourcegroupnotfound"})
_IN_USE_CODES = frozenset({"inusenetworksecuritygroupcannotbedeleted", "publicipaddresscannotbedeleted", "nicinuse",
                           "inusesubnetcannotbedeleted"})


def translate_error(exc: BaseException) -> ProviderError:
    """The one place Azure SDK errors become orch's taxonomy (codes from ARM's error body, then status)."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, HttpResponseError):
        code = (exc.error.code if exc.error is not None and exc.error.code else "") or ""
        status = exc.status_code or (exc.response.status_code if exc.response is not None else None)
        message = (exc.error.message if exc.error is not None and exc.error.message else None) or exc.message
        key = code.lower()
        kw: dict[str, Any] = {"provider": NAME, "code": code or (str(status) if status else None)}
        if key in _CAPACITY_CODES:
            return InsufficientCapacityError(message, **kw)
        if key in _PRICE_CODES:
            return PriceTooLowError(message, **kw)
        if key in _QUOTA_CODES:
            return QuotaExceededError(message, **kw)
        if key in _THROTTLE_CODES or status == 429:
            return RateLimitedError(message, **kw)
        if key in _AUTH_CODES or status in (401, 403) or isinstance(exc, ClientAuthenticationError):
            return AuthError(message, hint=AUTH_HINT, **kw)
        if key in _NOT_FOUND_CODES or status == 404:
            return InstanceNotFoundError(message, **kw)
        if key in _IN_USE_CODES:
            return ResourceInUseError(message, **kw)
        if status is not None and status >= 500:
            return ProviderUnavailableError(message, **kw)
        if key == "invalidparameter" or status == 400:
            return InvalidRequestError(message, **kw)
        if status is None:  # an LRO that failed with a code we do not know: a failed operation, not a bug
            return ProviderUnavailableError(message, **kw)
        return InvalidRequestError(message, **kw)
    if isinstance(exc, ClientAuthenticationError):
        return AuthError(str(exc), provider=NAME, hint=AUTH_HINT)
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return ProviderUnavailableError(str(exc), provider=NAME, code=type(exc).__name__)
    if isinstance(exc, AzureError):
        return ProviderUnavailableError(str(exc), provider=NAME, code=type(exc).__name__)
    return ProviderUnavailableError(str(exc), provider=NAME, code=type(exc).__name__)


class StaticTokenCredential:
    """A fixed bearer token (tests against a local fake only). Never used unless settings.static_token."""

    def __init__(self, token: str) -> None:
        self._token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self._token, 2**31 - 1)


class StaticBearerPolicy(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """Sets ``Authorization: Bearer <token>`` without the https check of the SDK's bearer policy."""

    def __init__(self, token: str) -> None:
        self._header = f"Bearer {token}"

    def on_request(self, request: PipelineRequest) -> None:  # type: ignore[type-arg]
        request.http_request.headers["Authorization"] = self._header


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


class AzureProvider(Provider):
    """Azure VMs in one resource group. instance_id == VM name (== instance_name(owner, launch_id))."""

    name: ClassVar[str] = NAME
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.SPOT, Capability.STOP, Capability.TAGS, Capability.MULTI_NODE, Capability.PREEMPTION_NOTICE,
    })

    def __init__(self, settings: Settings, *, retry: RetryPolicy | None = None,
                 credential: Any = None, sleep: Callable[[float], None] | None = None) -> None:
        self.settings = settings
        self.retry = retry or settings.retry_policy()
        self._sleep = sleep
        self._credential = credential
        self._compute: ComputeManagementClient | None = None
        self._network: NetworkManagementClient | None = None

    # -- clients ------------------------------------------------------------------------------------

    def _cred(self) -> Any:
        if self._credential is None:
            if self.settings.static_token:
                self._credential = StaticTokenCredential(self.settings.static_token)
            else:
                from azure.identity import DefaultAzureCredential

                self._credential = DefaultAzureCredential()
        return self._credential

    def _client_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "retry_total": 0,
            "polling_interval": self.settings.polling_interval_s,
            "connection_timeout": self.settings.connect_timeout_s,
            "read_timeout": self.settings.read_timeout_s,
        }
        if self.settings.base_url:
            kw["base_url"] = self.settings.base_url
        if self.settings.static_token:
            kw["authentication_policy"] = StaticBearerPolicy(self.settings.static_token)
        return kw

    def _require_config(self) -> tuple[str, str]:
        s = self.settings
        if not s.subscription_id:
            raise AuthError("no Azure subscription configured", provider=NAME,
                            hint="set AZURE_SUBSCRIPTION_ID or providers.azure.subscription_id")
        if not s.resource_group:
            raise AuthError("no Azure resource group configured", provider=NAME,
                            hint="set providers.azure.resource_group (or ORCH_AZURE_RESOURCE_GROUP)")
        return s.subscription_id, s.resource_group

    @property
    def rg(self) -> str:
        return self._require_config()[1]

    def compute(self) -> ComputeManagementClient:
        if self._compute is None:
            sub, _ = self._require_config()
            self._compute = ComputeManagementClient(self._cred(), sub, **self._client_kwargs())
        return self._compute

    def network(self) -> NetworkManagementClient:
        if self._network is None:
            sub, _ = self._require_config()
            self._network = NetworkManagementClient(self._cred(), sub, **self._client_kwargs())
        return self._network

    def close(self) -> None:
        for client in (self._compute, self._network):
            if client is not None:
                client.close()
        self._compute = self._network = None

    # -- calling ------------------------------------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        """Run one SDK call with translation and orch's retry policy."""

        def once() -> T:
            try:
                return fn()
            except ProviderError:
                raise
            except Exception as exc:  # every SDK failure goes through translate_error
                raise translate_error(exc) from exc

        if self._sleep is not None:
            return call_with_retry(once, self.retry, sleep=self._sleep)
        return call_with_retry(once, self.retry)

    def _wait(self, poller: LROPoller[Any], timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for an LRO; True when done. A failed LRO raises (translated)."""
        try:
            poller.wait(timeout=timeout_s)
            if not poller.done():
                return False
            poller.result()
            return True
        except ProviderError:
            raise
        except Exception as exc:
            raise translate_error(exc) from exc

    def _absent_ok(self, fn: Callable[[], T]) -> T | None:
        try:
            return self._call(fn)
        except InstanceNotFoundError:
            return None

    # -- protocol -----------------------------------------------------------------------------------

    def check_credentials(self) -> None:
        self._require_config()
        try:
            self._cred().get_token("https://management.azure.com/.default")
        except Exception as exc:
            raise AuthError(f"cannot get an Azure token: {type(exc).__name__}", provider=NAME,
                            hint=AUTH_HINT) from exc
        self._call(lambda: next(iter(self.compute().virtual_machines.list(self.rg)), None))

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
        rg = self.rg
        existing = self.get(spec.name)
        if existing is not None:
            return existing
        if not self.settings.subnet_id:
            raise InvalidRequestError("providers.azure.subnet_id is not set", provider=NAME,
                                      hint="the full resource id of an existing subnet for the NICs")
        tags = self._tags(spec)
        pip = self._ensure_public_ip(spec, tags) if self.settings.public_ip else None
        # With a public address the NIC always gets orch's NSG: intra-network traffic allowed, port 22 only
        # from ssh_ingress_cidrs (none by default), everything else from outside refused.
        nsg = self._ensure_nsg(spec.owner, spec.offer.region) if self.settings.public_ip else None
        nic = self._create_nic(spec, tags, public_ip_id=pip.id if pip else None, nsg_id=nsg.id if nsg else None)
        body = self.vm_body(spec, nic_id=nic.id or "", tags=tags)
        if spec.gang:   # a multi-node gang: its VMs in one proximity placement group
            ppg_id = self._ensure_ppg(spec)
            body.properties.proximity_placement_group = cm.SubResource(id=ppg_id)
            if placement.uses_infiniband(spec.offer.instance_type, gang=spec.gang):
                # One InfiniBand fabric needs one availability set (which takes no zone).
                body.properties.availability_set = cm.SubResource(id=self._ensure_avset(spec, ppg_id))
                body.zones = None
        vm_ops = self.compute().virtual_machines
        try:
            poller = self._call(lambda: vm_ops.begin_create_or_update(rg, spec.name, body))
            self._wait(poller, self.settings.create_wait_s)
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
        rg = self.rg
        vm = self._absent_ok(lambda: self.compute().virtual_machines.get(rg, instance_id, expand="instanceView"))
        if vm is None:
            return None
        return self._reap_failed(self._to_instance(vm, vm.properties.instance_view if vm.properties else None,
                                                   private_ip=self._nic_ip(instance_id),
                                                   public_ip=self._public_ip(instance_id)))

    def list_instances(self, owner: str) -> list[Instance]:
        rg = self.rg
        vms = self._call(lambda: list(self.compute().virtual_machines.list(rg)))
        ips = self._nic_ips()
        public = self._public_ips()
        found: list[Instance] = []
        for vm in vms:
            if (vm.tags or {}).get(TAG_OWNER) != owner or not vm.name:
                continue
            name = vm.name
            view = self._absent_ok(lambda name=name: self.compute().virtual_machines.instance_view(rg, name))
            found.append(self._reap_failed(self._to_instance(vm, view, private_ip=ips.get(name),
                                                             public_ip=public.get(name))))
        return found

    def _reap_failed(self, instance: Instance) -> Instance:
        """A VM whose create failed after the launch's wait (ProvisioningState/failed) reads as TERMINATED, so
        nobody else would delete it: it is deleted here, with its NIC, public IP and disk, the first time it
        is seen failed."""
        if instance.raw_state == "ProvisioningState/failed":
            self._cleanup_failed_launch(instance.instance_id)
        return instance

    def terminate(self, instance_id: str) -> None:
        rg = self.rg
        vm_ops = self.compute().virtual_machines
        poller = self._absent_ok(lambda: vm_ops.begin_delete(rg, instance_id))
        if poller is not None:
            try:
                done = self._wait(poller, self.settings.delete_wait_s)
            except InstanceNotFoundError:
                done = True
            if not done:
                return  # deleteOption=Delete removes NIC and disk when ARM finishes
        nic_ops = self.network().network_interfaces
        disk_ops = self.compute().disks
        nic_poller = self._absent_ok(lambda: nic_ops.begin_delete(rg, network.nic_name(instance_id)))
        if nic_poller is not None:
            self._wait_absent_ok(nic_poller, self.settings.delete_wait_s)
        self._delete_quietly(lambda: self.network().public_ip_addresses.begin_delete(rg, network.pip_name(instance_id)))
        self._absent_ok(lambda: disk_ops.begin_delete(rg, f"{instance_id}-osdisk"))

    def stop(self, instance_id: str) -> None:
        """Deallocate (no compute billing, disk kept), after tagging it so it is not read as evicted."""
        rg = self.rg
        vm_ops = self.compute().virtual_machines
        vm = self._call(lambda: vm_ops.get(rg, instance_id))
        tags = {**(vm.tags or {}), TAG_STOPPED: datetime.now().astimezone().isoformat(timespec="seconds")}
        update = cm.VirtualMachineUpdate(tags=tags)
        self._wait(self._call(lambda: vm_ops.begin_update(rg, instance_id, update)), self.settings.create_wait_s)
        self._call(lambda: vm_ops.begin_deallocate(rg, instance_id))

    def list_network_resources(self, owner: str) -> list[CloudResource]:
        """This owner's public IPs, SSH NSGs and NICs in the resource group (by tag), with ``in_use``."""
        rg, net = self.rg, self.network()
        pips = self._call(lambda: list(net.public_ip_addresses.list(rg)))
        nsgs = self._call(lambda: list(net.network_security_groups.list(rg)))
        nics = self._call(lambda: list(net.network_interfaces.list(rg)))
        ppgs = self._call(lambda: list(self.compute().proximity_placement_groups.list_by_resource_group(rg)))
        sets = self._call(lambda: list(self.compute().availability_sets.list(rg)))
        return (network.owned_resources(owner, pips=pips, nsgs=nsgs, nics=nics) + placement.owned_ppgs(owner, ppgs)
                + placement.owned_avsets(owner, sets))

    def delete_network_resource(self, resource: CloudResource) -> None:
        """Delete one; missing == success; ResourceInUseError while ARM says something still uses it."""
        rg, net = self.rg, self.network()
        if resource.kind in (ResourceKind.PLACEMENT_GROUP, ResourceKind.AVAILABILITY_SET):
            compute = self.compute()
            sync = (compute.proximity_placement_groups if resource.kind is ResourceKind.PLACEMENT_GROUP
                    else compute.availability_sets)
            try:   # a synchronous delete in ARM (no long-running operation)
                self._call(lambda: sync.delete(rg, resource.name))
            except ResourceNotFoundError:
                pass
            return
        deleters = {ResourceKind.PUBLIC_IP: net.public_ip_addresses, ResourceKind.NETWORK_INTERFACE:
                    net.network_interfaces, ResourceKind.NETWORK_SECURITY_GROUP: net.network_security_groups}
        ops = deleters.get(resource.kind)
        if ops is None:
            return
        try:
            poller = self._call(lambda: ops.begin_delete(rg, resource.name))
            self._wait(poller, self.settings.delete_wait_s)
        except ResourceNotFoundError:
            return

    # -- pieces -------------------------------------------------------------------------------------

    def _wait_absent_ok(self, poller: LROPoller[Any], timeout_s: float) -> None:
        try:
            self._wait(poller, timeout_s)
        except InstanceNotFoundError:
            pass

    def _delete_quietly(self, begin: Callable[[], LROPoller[Any]]) -> None:
        """Best effort: missing is done, in use (a NIC not yet gone) is left to garbage collection."""
        try:
            poller = self._call(begin)
            self._wait(poller, self.settings.delete_wait_s)
        except (ResourceNotFoundError, ResourceInUseError):
            pass

    def _ensure_public_ip(self, spec: LaunchSpec, tags: dict[str, str]) -> nm.PublicIPAddress:
        rg, ops = self.rg, self.network().public_ip_addresses
        name = network.pip_name(spec.name)
        body = network.public_ip_body(spec.offer.region, tags)
        self._wait(self._call(lambda: ops.begin_create_or_update(rg, name, body)), self.settings.create_wait_s)
        pip: nm.PublicIPAddress = self._call(lambda: ops.get(rg, name))
        return pip

    def _ensure_ppg(self, spec: LaunchSpec) -> str:
        """The id of ``spec.gang``'s proximity placement group, PUT when missing (providers.azure.placement)."""
        rg, ops = self.rg, self.compute().proximity_placement_groups
        name = placement.ppg_name(spec.owner, spec.gang)
        current: cm.ProximityPlacementGroup | None = self._absent_ok(lambda: ops.get(rg, name))
        if current is None:
            body = placement.ppg_body(spec.offer.region, owner=spec.owner, gang=spec.gang, launch_id=spec.launch_id)
            current = self._call(lambda: ops.create_or_update(rg, name, body))
        assert current is not None
        return current.id or ""

    def _ensure_avset(self, spec: LaunchSpec, ppg_id: str) -> str:
        """The id of an InfiniBand gang's availability set, PUT when missing (providers.azure.placement)."""
        rg, ops = self.rg, self.compute().availability_sets
        name = placement.avset_name(spec.owner, spec.gang)
        current: cm.AvailabilitySet | None = self._absent_ok(lambda: ops.get(rg, name))
        if current is None:
            body = placement.avset_body(spec.offer.region, ppg_id=ppg_id, owner=spec.owner, gang=spec.gang,
                                        launch_id=spec.launch_id)
            current = self._call(lambda: ops.create_or_update(rg, name, body))
        assert current is not None
        return current.id or ""

    def _ensure_nsg(self, owner: str, region: str) -> nm.NetworkSecurityGroup:
        """The owner's shared SSH NSG in ``region``: PUT only when missing or its rules differ."""
        rg, ops = self.rg, self.network().network_security_groups
        name = network.nsg_name(owner, region)
        cidrs = self.settings.ssh_ingress_cidrs
        current: nm.NetworkSecurityGroup | None = self._absent_ok(lambda: ops.get(rg, name))
        if current is not None and network.nsg_admits(current, cidrs):
            return current
        body = network.nsg_body(owner, region, cidrs)
        self._wait(self._call(lambda: ops.begin_create_or_update(rg, name, body)), self.settings.create_wait_s)
        nsg: nm.NetworkSecurityGroup = self._call(lambda: ops.get(rg, name))
        return nsg

    @staticmethod
    def _tags(spec: LaunchSpec) -> dict[str, str]:
        return {TAG_LAUNCH_ID: spec.launch_id, TAG_OWNER: spec.owner, TAG_JOB: spec.job}

    def _create_nic(self, spec: LaunchSpec, tags: dict[str, str], *, public_ip_id: str | None,
                    nsg_id: str | None) -> nm.NetworkInterface:
        rg = self.rg
        nic_body = nm.NetworkInterface(
            location=spec.offer.region,
            tags=tags,
            properties=nm.NetworkInterfacePropertiesFormat(
                ip_configurations=[
                    nm.NetworkInterfaceIPConfiguration(
                        name="ipconfig1",
                        properties=nm.NetworkInterfaceIPConfigurationPropertiesFormat(
                            subnet=nm.Subnet(id=self.settings.subnet_id),
                            private_ip_allocation_method="Dynamic",
                            public_ip_address=nm.PublicIPAddress(id=public_ip_id) if public_ip_id else None,
                        ),
                    ),
                ],
                network_security_group=nm.NetworkSecurityGroup(id=nsg_id) if nsg_id else None,
            ),
        )
        nic_ops = self.network().network_interfaces
        poller = self._call(lambda: nic_ops.begin_create_or_update(rg, f"{spec.name}-nic", nic_body))
        self._wait(poller, self.settings.create_wait_s)
        nic: nm.NetworkInterface = self._call(lambda: nic_ops.get(rg, f"{spec.name}-nic"))
        return nic

    def vm_body(self, spec: LaunchSpec, *, nic_id: str, tags: dict[str, str]) -> cm.VirtualMachine:
        """The VirtualMachine PUT body for ``spec`` (public so tests can read what is sent)."""
        s = self.settings
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
                    name=f"{spec.name}-osdisk", create_option="FromImage", disk_size_gb=spec.disk_gb,
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
                                 identity=self._identity())

    def _identity(self) -> cm.VirtualMachineIdentity | None:
        """The node's identity for the checkpoint store (settings.managed_identity), or none."""
        wanted = self.settings.managed_identity
        if wanted is None:
            return None
        if wanted == "system":
            return cm.VirtualMachineIdentity(type="SystemAssigned")
        return cm.VirtualMachineIdentity(type="UserAssigned",
                                         user_assigned_identities={wanted: cm.UserAssignedIdentitiesValue()})

    def _cleanup_failed_launch(self, name: str) -> None:
        """Best effort after a refused or failed create: no VM, NIC or disk left behind."""
        try:
            self.terminate(name)
        except ProviderError:
            pass  # GC finds the tagged leftovers later

    def _nic_ip(self, name: str) -> str | None:
        rg = self.rg
        nic = self._absent_ok(lambda: self.network().network_interfaces.get(rg, f"{name}-nic"))
        return _first_private_ip(nic) if nic is not None else None

    def _public_ip(self, name: str) -> str | None:
        if not self.settings.public_ip:
            return None
        rg = self.rg
        pip = self._absent_ok(lambda: self.network().public_ip_addresses.get(rg, network.pip_name(name)))
        return (pip.properties.ip_address or None) if pip is not None and pip.properties else None

    def _public_ips(self) -> dict[str, str]:
        if not self.settings.public_ip:
            return {}
        rg = self.rg
        pips = self._call(lambda: list(self.network().public_ip_addresses.list(rg)))
        return {p.name[: -len("-pip")]: p.properties.ip_address for p in pips
                if p.name and p.name.endswith("-pip") and p.properties and p.properties.ip_address}

    def _nic_ips(self) -> dict[str, str]:
        rg = self.rg
        nics = self._call(lambda: list(self.network().network_interfaces.list(rg)))
        ips: dict[str, str] = {}
        for nic in nics:
            ip = _first_private_ip(nic)
            if nic.name and nic.name.endswith("-nic") and ip:
                ips[nic.name[: -len("-nic")]] = ip
        return ips

    def _to_instance(self, vm: cm.VirtualMachine, view: cm.VirtualMachineInstanceView | None,
                     *, private_ip: str | None, public_ip: str | None = None) -> Instance:
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
        extra: tuple[tuple[str, str], ...] = (("resource_group", self.rg),)
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
            ssh_user=self.settings.admin_username,
            created_at=props.time_created if props else None,
            extra=extra,
            fabric=Fabric.INFINIBAND if tags.get(TAG_FABRIC) == Fabric.INFINIBAND.value else None,
        )


def _first_private_ip(nic: nm.NetworkInterface) -> str | None:
    configs = nic.properties.ip_configurations if nic.properties and nic.properties.ip_configurations else []
    for cfg in configs:
        if cfg.properties and cfg.properties.private_ip_address:
            return str(cfg.properties.private_ip_address)
    return None
