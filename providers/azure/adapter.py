"""Azure virtual machines on azure-mgmt-compute + azure-mgmt-network (a NIC per VM).

Ids are the VM name (``orch-<owner>-<launch_id>``) in the configured resource group; tags carry
orch:launch-id / orch:owner / orch:job. ARM PUTs are idempotent by name and a GET first makes a repeat
launch return the existing VM. Launch waits for the create's long-running operation, because Azure
reports AllocationFailed only there; it does not wait for the OS to boot.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from azure.core import exceptions as aexc
from azure.core.pipeline.policies import SansIOHTTPPolicy
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.network import NetworkManagementClient

from providers.azure.settings import Settings
from providers.base import (
    TAG_JOB,
    TAG_LAUNCH_ID,
    TAG_OWNER,
    Capability,
    GpuRequest,
    Instance,
    InstanceState,
    LaunchSpec,
    Market,
    Offer,
    Provider,
)
from providers.catalog import load_catalog, match_offers
from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    ProviderError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)
from providers.retry import call_with_retry

T = TypeVar("T")
_CAPACITY = {"SkuNotAvailable", "AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest",
             "OverconstrainedZonalAllocationRequest", "SpotVMEvictionNotAllowed"}
_QUOTA = {"OperationNotAllowed", "QuotaExceeded", "ResourceQuotaExceeded"}
_AUTH = {"AuthenticationFailed", "AuthorizationFailed", "InvalidAuthenticationToken", "ExpiredAuthenticationToken",
         "LinkedAuthorizationFailed"}
_NOT_FOUND = {"ResourceNotFound", "NotFound", "ResourceGroupNotFound"}
EVICTED = "Azure Spot eviction"
_HINT = "run `az login`, or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET"


def translate_error(exc: Exception) -> ProviderError:
    """The one place Azure SDK errors become orch's taxonomy (by ARM error code, then HTTP status)."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, aexc.ClientAuthenticationError):
        return AuthError(str(exc.message or exc), provider="azure", hint=_HINT)
    if isinstance(exc, aexc.HttpResponseError):
        code = getattr(exc.error, "code", None) if exc.error is not None else None
        status = int(exc.status_code or 0)
        msg = str(getattr(exc.error, "message", None) or exc.message or exc)
        if code in _CAPACITY:
            return InsufficientCapacityError(msg, provider="azure", code=code)
        if code in _QUOTA:
            return QuotaExceededError(msg, provider="azure", code=code, hint="request a quota increase for this family")
        if code in ("TooManyRequests", "RetryableError") or status == 429:
            return RateLimitedError(msg, provider="azure", code=code)
        if code in _AUTH or status in (401, 403):
            return AuthError(msg, provider="azure", code=code, hint=_HINT)
        if code in _NOT_FOUND or status == 404:
            return InstanceNotFoundError(msg, provider="azure", code=code)
        if status >= 500:
            return ProviderUnavailableError(msg, provider="azure", code=code)
        return InvalidRequestError(msg, provider="azure", code=code)
    if isinstance(exc, aexc.ServiceRequestError | aexc.ServiceResponseError):
        return ProviderUnavailableError(str(exc), provider="azure")
    raise exc


class _StaticToken(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """Tests only: a fixed bearer header, so the SDK talks to a plain-http fake."""

    def __init__(self, token: str) -> None:
        self._token = token

    def on_request(self, request: Any) -> None:
        request.http_request.headers["Authorization"] = f"Bearer {self._token}"


class AzureProvider(Provider):
    name: ClassVar[str] = "azure"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.SPOT, Capability.STOP, Capability.TAGS, Capability.MULTI_NODE, Capability.PREEMPTION_NOTICE})

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._policy = settings.retry_policy()
        self._compute: ComputeManagementClient | None = None
        self._network: NetworkManagementClient | None = None

    # --- plumbing ------------------------------------------------------------------------------------
    @property
    def rg(self) -> str:
        if not self.settings.resource_group:
            raise AuthError("no resource group configured", provider="azure",
                            hint="set providers.azure.resource_group in orch's config")
        return self.settings.resource_group

    def _clients(self) -> tuple[ComputeManagementClient, NetworkManagementClient]:
        if self._compute is None or self._network is None:
            if not self.settings.subscription_id:
                raise AuthError("no Azure subscription configured", provider="azure",
                                hint="set providers.azure.subscription_id or AZURE_SUBSCRIPTION_ID")
            kwargs: dict[str, Any] = {"retry_total": 0, "connection_timeout": self.settings.timeout_s,
                                      "read_timeout": self.settings.timeout_s}
            if self.settings.base_url:
                kwargs["base_url"] = self.settings.base_url
            if self.settings.static_token is not None:
                credential: Any = object()
                kwargs["authentication_policy"] = _StaticToken(self.settings.static_token.get_secret_value())
            else:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential()
            self._compute = ComputeManagementClient(credential, self.settings.subscription_id, **kwargs)
            self._network = NetworkManagementClient(credential, self.settings.subscription_id, **kwargs)
        return self._compute, self._network

    def _call(self, fn: Callable[[], T]) -> T:
        def once() -> T:
            try:
                return fn()
            except Exception as exc:
                raise translate_error(exc) from exc

        return call_with_retry(once, self._policy)

    def _poll(self) -> dict[str, Any]:
        return {"polling_interval": self.settings.polling_interval_s}

    def _to_instance(self, vm: Any, power: str | None) -> Instance:
        tags = dict(vm.tags or {})
        spot = (vm.priority or "").lower() == "spot"
        provisioning = (vm.provisioning_state or "").lower()
        if power in ("running",):
            state = InstanceState.RUNNING
        elif power in ("starting",) or provisioning in ("creating", "updating"):
            state = InstanceState.PENDING
        elif power in ("stopping", "deallocating"):
            state = InstanceState.STOPPING
        elif power in ("stopped", "deallocated"):
            state = InstanceState.STOPPED
        elif provisioning == "deleting":
            state = InstanceState.STOPPING
        else:
            state = InstanceState.PENDING
        reason = None
        # orch never deallocates a Spot VM itself (idle "stop" terminates spot): deallocated Spot = evicted.
        if spot and power == "deallocated":
            state, reason = InstanceState.PREEMPTED, EVICTED
        return Instance(
            provider="azure", instance_id=vm.name, launch_id=tags.get(TAG_LAUNCH_ID), owner=tags.get(TAG_OWNER),
            job=tags.get(TAG_JOB), state=state,
            instance_type=vm.hardware_profile.vm_size if vm.hardware_profile else "",
            region=vm.location or "", zone=(vm.zones[0] if vm.zones else None),
            market=Market.SPOT if spot else Market.ON_DEMAND,
            raw_state=f"PowerState/{power}" if power else provisioning,
            raw_reason=reason, ssh_user=self.settings.admin_username)

    def _power(self, name: str) -> str | None:
        compute, _ = self._clients()
        view = self._call(lambda: compute.virtual_machines.instance_view(self.rg, name))
        for status in view.statuses or []:
            if status.code and status.code.startswith("PowerState/"):
                return str(status.code.split("/", 1)[1])
        return None

    def _get_vm(self, name: str) -> Any | None:
        compute, _ = self._clients()
        try:
            return self._call(lambda: compute.virtual_machines.get(self.rg, name))
        except InstanceNotFoundError:
            return None

    # --- Provider ------------------------------------------------------------------------------------
    def check_credentials(self) -> None:
        if self.settings.static_token is None:
            from azure.identity import DefaultAzureCredential

            try:
                DefaultAzureCredential().get_token("https://management.azure.com/.default")
            except Exception as exc:
                raise AuthError(f"no usable Azure credentials: {type(exc).__name__}", provider="azure",
                                hint=_HINT) from exc
        compute, _ = self._clients()
        self._call(lambda: list(compute.virtual_machines.list(self.rg)))

    def offers(self, req: GpuRequest) -> list[Offer]:
        """Catalog offers (Azure prices come from the Retail Prices API: a later refresh)."""
        return match_offers([o for o in load_catalog().offers if o.provider == "azure"], req)

    def launch(self, spec: LaunchSpec) -> Instance:
        existing = self._get_vm(spec.name)
        if existing is not None:
            return self._to_instance(existing, self._power(spec.name))
        if not self.settings.subnet_id:
            raise InvalidRequestError("no subnet configured for the VM's NIC", provider="azure",
                                      hint="set providers.azure.subnet_id to an existing subnet's resource id")
        compute, network = self._clients()
        from azure.mgmt.compute import models as cm
        from azure.mgmt.network import models as nm

        tags = {TAG_LAUNCH_ID: spec.launch_id, TAG_OWNER: spec.owner, TAG_JOB: spec.job}
        nic_body = nm.NetworkInterface(location=spec.offer.region, tags=tags, ip_configurations=[
            nm.NetworkInterfaceIPConfiguration(name="ipconfig1", subnet=nm.Subnet(id=self.settings.subnet_id),
                                               private_ip_allocation_method="Dynamic")])
        nic = self._call(lambda: network.network_interfaces.begin_create_or_update(
            self.rg, f"{spec.name}-nic", nic_body, **self._poll()).result())
        linux = cm.LinuxConfiguration(disable_password_authentication=True)
        if spec.ssh_public_key:
            linux.ssh = cm.SshConfiguration(public_keys=[cm.SshPublicKey(
                path=f"/home/{self.settings.admin_username}/.ssh/authorized_keys", key_data=spec.ssh_public_key)])
        os_profile = cm.OSProfile(computer_name=spec.name[:64], admin_username=self.settings.admin_username,
                                  linux_configuration=linux)
        if spec.startup_script:
            os_profile.custom_data = base64.b64encode(spec.startup_script.encode()).decode()
        body = cm.VirtualMachine(
            location=spec.offer.region, tags=tags,
            hardware_profile=cm.HardwareProfile(vm_size=spec.offer.instance_type),
            storage_profile=cm.StorageProfile(
                image_reference=cm.ImageReference(publisher=self.settings.image_publisher,
                                                  offer=self.settings.image_offer, sku=self.settings.image_sku,
                                                  version=self.settings.image_version),
                os_disk=cm.OSDisk(name=f"{spec.name}-os", create_option="FromImage", delete_option="Delete",
                                  disk_size_gb=spec.disk_gb)),
            os_profile=os_profile,
            network_profile=cm.NetworkProfile(network_interfaces=[
                cm.NetworkInterfaceReference(id=nic.id, primary=True, delete_option="Delete")]),
        )
        if spec.offer.market is Market.SPOT:
            body.priority = "Spot"
            body.eviction_policy = self.settings.eviction_policy
            body.billing_profile = cm.BillingProfile(max_price=spec.max_price_hr if spec.max_price_hr else -1)
        try:
            vm = self._call(lambda: compute.virtual_machines.begin_create_or_update(
                self.rg, spec.name, body, **self._poll()).result())
        except (InsufficientCapacityError, QuotaExceededError, AuthError, InvalidRequestError):
            self._delete_leftovers(spec.name)   # a refused VM must not leave its NIC (or a failed VM) behind
            raise
        return self._to_instance(vm, self._power(spec.name))

    def get(self, instance_id: str) -> Instance | None:
        vm = self._get_vm(instance_id)
        if vm is None:
            return None
        return self._to_instance(vm, self._power(instance_id))

    def list_instances(self, owner: str) -> list[Instance]:
        compute, _ = self._clients()
        vms = self._call(lambda: list(compute.virtual_machines.list(self.rg)))
        mine = [vm for vm in vms if (vm.tags or {}).get(TAG_OWNER) == owner]
        return [self._to_instance(vm, self._power(vm.name)) for vm in mine]

    def terminate(self, instance_id: str) -> None:
        compute, _ = self._clients()
        try:
            self._call(lambda: compute.virtual_machines.begin_delete(self.rg, instance_id, **self._poll()).result())
        except InstanceNotFoundError:
            pass
        self._delete_leftovers(instance_id)

    def _delete_leftovers(self, name: str) -> None:
        compute, network = self._clients()
        for fn in (lambda: compute.virtual_machines.begin_delete(self.rg, name, **self._poll()).result(),
                   lambda: network.network_interfaces.begin_delete(self.rg, f"{name}-nic", **self._poll()).result(),
                   lambda: compute.disks.begin_delete(self.rg, f"{name}-os", **self._poll()).result()):
            try:
                self._call(fn)
            except InstanceNotFoundError:
                pass

    def stop(self, instance_id: str) -> None:
        compute, _ = self._clients()
        self._call(lambda: compute.virtual_machines.begin_deallocate(self.rg, instance_id, **self._poll()).result())

    def close(self) -> None:
        for client in (self._compute, self._network):
            if client is not None:
                client.close()
        self._compute = self._network = None
