"""Google Compute Engine on google-cloud-compute (REST): on-demand and spot GPU VMs, labelled with orch's ids.

Instance ids are ``<zone>/<name>`` (``us-central1-a/orch-alice-l0123456789ab``): every GCE call needs the
zone, and the name is ``instance_name(owner, launch_id)``, unique per project and zone.

Idempotency: the name is derived from the launch id, so ``launch`` first GETs it (200: return it); the
insert carries ``requestId = uuid5(launch id)``, so a retried insert after a lost answer is deduplicated
by GCE itself (it returns the first insert's operation), and a 409 alreadyExists means "it is ours".

Operations: ``insert_unary`` / ``delete_unary`` / ``stop_unary`` return the zone Operation; launch waits
for the insert operation with its OWN ZoneOperationsClient built with the same client_options (the SDK's
``insert().result()`` polls through a client that ignores them). Capacity and quota failures of GCE
arrive in that operation's ``error``; they go through the same ``translate_error``.

The SDK's own retry is off (``retry=None``) on every call: transient errors are retried only by
providers.retry, so the test fake's fault switches are deterministic and deadlines are ours.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import ClassVar, TypeVar

import google.auth
import google.auth.exceptions
import requests.exceptions
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import compute_v1

from providers.base import (
    LABEL_JOB,
    LABEL_LAUNCH_ID,
    LABEL_OWNER,
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
    ResourceInUseError,
)
from providers.fabric import Fabric
from providers.gcp import network, placement
from providers.gcp.settings import Settings
from providers.retry import call_with_retry

T = TypeVar("T")

PREEMPTED_OPERATION = "compute.instances.preempted"
#: uuid5 namespace for insert requestIds: the same launch id always yields the same requestId.
REQUEST_ID_NAMESPACE = uuid.UUID("6b1d3c1e-2f4a-5c7d-9e8f-0a1b2c3d4e5f")
_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
_AUTH_HINT = "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"

_STATES = {
    "PROVISIONING": InstanceState.PENDING, "STAGING": InstanceState.PENDING, "PENDING": InstanceState.PENDING,
    "REPAIRING": InstanceState.UNREACHABLE,   # "The instance is in repair": unusable now, may come back
    "RUNNING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING, "SUSPENDING": InstanceState.STOPPING,
    "PENDING_STOP": InstanceState.STOPPING, "DEPROVISIONING": InstanceState.STOPPING,
    "STOPPED": InstanceState.STOPPED, "SUSPENDED": InstanceState.STOPPED,
    "TERMINATED": InstanceState.STOPPED,   # GCE's word for a stopped VM (disk kept); deleted VMs are 404
}

# Structured codes: operation errors carry errors[].code, HTTP errors errors[].reason (and ErrorInfo.reason).
_CAPACITY = {"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "RESOURCE_POOL_EXHAUSTED",
             "resourcePoolExhausted", "STOCKOUT"}
_QUOTA = {"QUOTA_EXCEEDED", "quotaExceeded", "QUOTA_LIMIT_EXCEEDED"}
# HTTP errors: errors[].reason rateLimitExceeded/userRateLimitExceeded (ErrorInfo RATE_LIMIT_EXCEEDED, status
# RESOURCE_EXHAUSTED / 429 or 403). Operations: RESOURCE_OPERATION_RATE_EXCEEDED ("Operation rate exceeded for
# resource ...": too many operations on one resource/image in a short time) is a throttle, not a bad request.
_RATE = {"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED", "RESOURCE_OPERATION_RATE_EXCEEDED",
         "RESOURCE_EXHAUSTED"}
_AUTH = {"authError", "forbidden", "accessNotConfigured", "PERMISSIONS_ERROR", "insufficientPermissions",
         "ACCESS_TOKEN_SCOPE_INSUFFICIENT", "SERVICE_DISABLED"}
_NOT_FOUND = {"notFound", "RESOURCE_NOT_FOUND"}
#: GCE refusing to delete what another resource still uses (a placement policy an instance names).
_IN_USE = {"resourceInUseByAnotherResource", "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"}

#: Catalog GPU names on N1 (``n1-standard-8+4xT4``) -> GCE acceleratorType names.
N1_ACCELERATORS = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
                   "P4": "nvidia-tesla-p4", "K80": "nvidia-tesla-k80"}
_N1_TYPE = re.compile(r"^(?P<machine>[a-z0-9]+-[a-z0-9-]+)\+(?P<count>\d+)x(?P<gpu>[A-Za-z0-9]+)$")


class OperationError(Exception):
    """A zone operation that finished with ``error``; carries the structured fields for translate_error."""

    def __init__(self, op: compute_v1.Operation) -> None:
        self.operation_type = op.operation_type
        self.http_status = int(op.http_error_status_code or 0)
        self.codes = tuple(e.code for e in op.error.errors)
        self.messages = tuple(e.message for e in op.error.errors)
        super().__init__("; ".join(self.messages) or op.http_error_message or "operation failed")


def _error_codes(exc: gexc.GoogleAPICallError) -> set[str]:
    codes = {str(e.get("reason", "")) for e in exc.errors if isinstance(e, dict)}
    if exc.reason:
        codes.add(exc.reason)
    return codes - {""}


def translate_error(exc: BaseException) -> ProviderError:
    """The one place GCE errors (HTTP errors, failed operations, auth, transport) become orch's taxonomy."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, google.auth.exceptions.DefaultCredentialsError | google.auth.exceptions.RefreshError):
        return AuthError(str(exc), provider="gcp", hint=_AUTH_HINT)
    if isinstance(exc, OperationError):
        codes, status, message = set(exc.codes), exc.http_status, str(exc)
        code = exc.codes[0] if exc.codes else None
    elif isinstance(exc, gexc.GoogleAPICallError):
        codes, status, message = _error_codes(exc), int(exc.code or 0), exc.message
        code = sorted(codes)[0] if codes else None
    elif isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout | gexc.RetryError):
        return ProviderUnavailableError(str(exc), provider="gcp")
    else:
        raise exc
    if codes & _CAPACITY or (isinstance(exc, OperationError) and exc.operation_type == "insert" and status == 503):
        return InsufficientCapacityError(message, provider="gcp", code=code or "ZONE_RESOURCE_POOL_EXHAUSTED")
    if codes & _QUOTA:
        return QuotaExceededError(message, provider="gcp", code=code,
                                  hint="request more quota at https://console.cloud.google.com/iam-admin/quotas")
    if codes & _RATE or status == 429:
        return RateLimitedError(message, provider="gcp", code=code)
    if codes & _AUTH or status in (401, 403):
        return AuthError(message, provider="gcp", code=code,
                         hint=f"check the IAM roles of these credentials (Compute Instance Admin); {_AUTH_HINT}")
    if codes & _IN_USE:
        return ResourceInUseError(message, provider="gcp", code=code)
    if codes & _NOT_FOUND or status == 404:
        return InstanceNotFoundError(message, provider="gcp", code=code)
    if status >= 500:
        return ProviderUnavailableError(message, provider="gcp", code=code)
    return InvalidRequestError(message, provider="gcp", code=code)


def request_id(launch_id: str) -> str:
    """The insert requestId for a launch: a UUID, the same on every retry of the same launch."""
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, launch_id))


def label_value(value: str) -> str:
    """A GCE label value: lowercase letters, digits, '-' and '_', at most 63 characters."""
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]


def split_instance_id(instance_id: str) -> tuple[str, str]:
    zone, sep, name = instance_id.partition("/")
    if not sep or not zone or not name or "/" in name:
        raise InstanceNotFoundError(f"not an orch GCP instance id (zone/name): {instance_id!r}", provider="gcp")
    return zone, name


def machine_shape(instance_type: str) -> tuple[str, str | None, int]:
    """(machineType, acceleratorType or None, count). Accelerator-optimized types (a2, a3, g2) bring their
    GPUs; catalog N1 types spell the attached GPUs as ``n1-standard-8+4xT4``."""
    m = _N1_TYPE.fullmatch(instance_type)
    if m is None:
        return instance_type, None, 0
    gpu = m.group("gpu").upper()
    if gpu not in N1_ACCELERATORS:
        raise InvalidRequestError(f"unknown N1 accelerator {gpu!r} in {instance_type!r}", provider="gcp")
    return m.group("machine"), N1_ACCELERATORS[gpu], int(m.group("count"))


def _catalog_type(machine: str, accelerators: list[compute_v1.AcceleratorConfig]) -> str:
    """Inverse of machine_shape, so an N1 instance reads back with the catalog's instance type."""
    names = {v: k for k, v in N1_ACCELERATORS.items()}
    for acc in accelerators:
        gpu = names.get(acc.accelerator_type.rsplit("/", 1)[-1])
        if gpu:
            return f"{machine}+{acc.accelerator_count}x{gpu}"
    return machine


class GcpProvider(Provider):
    """GCE VMs. Offers come from the shipped catalog only (GCE has no live price/capacity API: no
    LIVE_OFFERS). Spot VMs get a preemption notice (ACPI soft-off, ~30 s): PREEMPTION_NOTICE."""

    name: ClassVar[str] = "gcp"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.SPOT, Capability.STOP, Capability.MULTI_NODE, Capability.PREEMPTION_NOTICE, Capability.TAGS})

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._policy = settings.retry_policy()
        self._clock = clock
        self._lock = threading.Lock()
        self._project: str | None = settings.project
        self._credentials: Credentials | None = None
        self._instances_client: compute_v1.InstancesClient | None = None
        self._operations_client: compute_v1.ZoneOperationsClient | None = None
        self._firewalls_client: compute_v1.FirewallsClient | None = None
        self._global_operations_client: compute_v1.GlobalOperationsClient | None = None
        self._policies_client: compute_v1.ResourcePoliciesClient | None = None
        self._region_operations_client: compute_v1.RegionOperationsClient | None = None

    # --- plumbing ------------------------------------------------------------------------------------
    def _resolve(self) -> tuple[Credentials, str]:
        """Credentials and project, looked up once and lazily (never at import or settings time)."""
        with self._lock:
            if self._credentials is None:
                project: str | None = None
                if self.settings.anonymous_credentials:
                    self._credentials = AnonymousCredentials()
                else:
                    try:
                        creds, project = google.auth.default(scopes=list(_SCOPES))
                    except google.auth.exceptions.DefaultCredentialsError as exc:
                        raise translate_error(exc) from exc
                    self._credentials = creds
                self._project = self._project or project or os.environ.get("GOOGLE_CLOUD_PROJECT")
            if not self._project:
                raise AuthError("no GCP project configured", provider="gcp",
                                hint="set providers.gcp.project in orch's config, or GOOGLE_CLOUD_PROJECT, "
                                     "or `gcloud config set project P` before the ADC login")
            return self._credentials, self._project

    def _clients(self) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient, str]:
        creds, project = self._resolve()
        with self._lock:
            if self._instances_client is None or self._operations_client is None:
                options = ClientOptions(api_endpoint=self.settings.api_endpoint) if self.settings.api_endpoint else None
                self._instances_client = compute_v1.InstancesClient(
                    credentials=creds, client_options=options, transport="rest")
                self._operations_client = compute_v1.ZoneOperationsClient(
                    credentials=creds, client_options=options, transport="rest")
            return self._instances_client, self._operations_client, project

    def _network_clients(self) -> tuple[compute_v1.FirewallsClient, compute_v1.GlobalOperationsClient, str]:
        creds, project = self._resolve()
        with self._lock:
            if self._firewalls_client is None or self._global_operations_client is None:
                options = ClientOptions(api_endpoint=self.settings.api_endpoint) if self.settings.api_endpoint else None
                self._firewalls_client = compute_v1.FirewallsClient(
                    credentials=creds, client_options=options, transport="rest")
                self._global_operations_client = compute_v1.GlobalOperationsClient(
                    credentials=creds, client_options=options, transport="rest")
            return self._firewalls_client, self._global_operations_client, project

    def _firewall_rules(self) -> network.FirewallRules:
        firewalls, _, project = self._network_clients()
        return network.FirewallRules(firewalls, project, call=self._call, wait=self._wait_global,
                                     timeout_s=self.settings.timeout_s)

    def _placement_clients(self) -> tuple[compute_v1.ResourcePoliciesClient, compute_v1.RegionOperationsClient, str]:
        creds, project = self._resolve()
        with self._lock:
            if self._policies_client is None or self._region_operations_client is None:
                options = ClientOptions(api_endpoint=self.settings.api_endpoint) if self.settings.api_endpoint else None
                self._policies_client = compute_v1.ResourcePoliciesClient(
                    credentials=creds, client_options=options, transport="rest")
                self._region_operations_client = compute_v1.RegionOperationsClient(
                    credentials=creds, client_options=options, transport="rest")
            return self._policies_client, self._region_operations_client, project

    def _placement_policies(self) -> placement.PlacementPolicies:
        policies, _, project = self._placement_clients()
        return placement.PlacementPolicies(policies, project, call=self._call, wait=self._wait_region,
                                           timeout_s=self.settings.timeout_s)

    def _wait_region(self, region: str, op: compute_v1.Operation) -> compute_v1.Operation:
        """``_wait`` for a region operation (resource policy changes)."""
        _, ops, project = self._placement_clients()
        deadline = self._clock() + self.settings.operation_timeout_s
        while op.status != compute_v1.Operation.Status.DONE:
            if self._clock() > deadline:
                raise ProviderUnavailableError(f"operation {op.name} still {op.status.name} after "
                                               f"{self.settings.operation_timeout_s:.0f}s", provider="gcp")
            op = self._call(lambda name=op.name: ops.wait(project=project, region=region, operation=name,
                                                          retry=None, timeout=self.settings.timeout_s))
        if op.error.errors:
            raise translate_error(OperationError(op))
        return op

    def _wait_global(self, op: compute_v1.Operation) -> compute_v1.Operation:
        """``_wait`` for a global operation (firewall changes)."""
        _, ops, project = self._network_clients()
        deadline = self._clock() + self.settings.operation_timeout_s
        while op.status != compute_v1.Operation.Status.DONE:
            if self._clock() > deadline:
                raise ProviderUnavailableError(f"operation {op.name} still {op.status.name} after "
                                               f"{self.settings.operation_timeout_s:.0f}s", provider="gcp")
            op = self._call(lambda name=op.name: ops.wait(project=project, operation=name, retry=None,
                                                          timeout=self.settings.timeout_s))
        if op.error.errors:
            raise translate_error(OperationError(op))
        return op

    def _once(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except Exception as exc:
            raise translate_error(exc) from exc

    def _call(self, fn: Callable[[], T]) -> T:
        return call_with_retry(lambda: self._once(fn), self._policy)

    def _wait(self, zone: str, op: compute_v1.Operation) -> compute_v1.Operation:
        """Wait for a zone operation to be DONE (bounded by operation_timeout_s); raise its error translated."""
        _, ops, project = self._clients()
        deadline = self._clock() + self.settings.operation_timeout_s
        while op.status != compute_v1.Operation.Status.DONE:
            if self._clock() > deadline:
                raise ProviderUnavailableError(f"operation {op.name} still {op.status.name} after "
                                               f"{self.settings.operation_timeout_s:.0f}s", provider="gcp")
            op = self._call(lambda name=op.name: ops.wait(project=project, zone=zone, operation=name,
                                                          retry=None, timeout=self.settings.timeout_s))
        if op.error.errors:
            raise translate_error(OperationError(op))
        return op

    def _fetch(self, zone: str, name: str) -> compute_v1.Instance | None:
        instances, _, project = self._clients()
        try:
            return self._call(lambda: instances.get(project=project, zone=zone, instance=name, retry=None,
                                                    timeout=self.settings.timeout_s))
        except InstanceNotFoundError:
            return None

    def _was_preempted(self, zone: str, raw: compute_v1.Instance) -> bool:
        _, ops, project = self._clients()
        request = compute_v1.ListZoneOperationsRequest(
            project=project, zone=zone,
            filter=f'(operationType = "{PREEMPTED_OPERATION}") (targetLink = "{raw.self_link}")')

        def run() -> bool:
            return any(op.target_link == raw.self_link
                       for op in ops.list(request=request, retry=None, timeout=self.settings.timeout_s))

        return self._call(run)

    def _to_instance(self, raw: compute_v1.Instance) -> Instance:
        labels = dict(raw.labels)
        zone = raw.zone.rsplit("/", 1)[-1]
        market = (Market.SPOT if raw.scheduling.provisioning_model == "SPOT" or raw.scheduling.preemptible
                  else Market.ON_DEMAND)
        state = _STATES.get(raw.status, InstanceState.PENDING)
        reason: str | None = raw.status_message or None
        if raw.status == "TERMINATED" and market is Market.SPOT and self._was_preempted(zone, raw):
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
            instance_type=_catalog_type(machine, list(raw.guest_accelerators)),
            region=zone.rsplit("-", 1)[0], zone=zone, market=market, raw_state=raw.status, raw_reason=reason,
            public_ip=public_ip or None, private_ip=(nic.network_i_p or None) if nic else None,
            ssh_user=self.settings.ssh_user, created_at=created, fabric=Fabric.GPUDIRECT_TCPX if tcpx else None,
        )

    def instance_body(self, spec: LaunchSpec, zone: str, *, placement_policy: str | None = None
                      ) -> compute_v1.Instance:
        """The Instance resource ``launch`` inserts for ``spec`` in ``zone`` (public for tests and docs):
        in ``placement_policy`` (the gang's compact placement policy) when given, and with the GPU NICs
        of GPUDirect-TCPX for a multi-node A3 High gang (providers/gcp/placement.py)."""
        machine, accelerator, count = machine_shape(spec.offer.instance_type)
        labels = {LABEL_LAUNCH_ID: label_value(spec.launch_id), LABEL_OWNER: label_value(spec.owner),
                  LABEL_JOB: label_value(spec.job)}
        # The DL VM image installs the NVIDIA driver at first boot when asked; a machine with no GPU has none to drive.
        items = [compute_v1.Items(key="install-nvidia-driver", value="True")] if spec.offer.gpu_count else []
        if spec.startup_script:
            items.append(compute_v1.Items(key="startup-script", value=spec.startup_script))
        if spec.ssh_public_key:
            items.append(compute_v1.Items(key="ssh-keys", value=f"{self.settings.ssh_user}:{spec.ssh_public_key}"))
        # GPU VMs cannot live-migrate: GCE requires onHostMaintenance TERMINATE for every one of them.
        if spec.offer.market is Market.SPOT:
            scheduling = compute_v1.Scheduling(
                provisioning_model="SPOT", instance_termination_action=self.settings.spot_termination_action,
                automatic_restart=False, on_host_maintenance="TERMINATE")
        else:
            scheduling = compute_v1.Scheduling(
                provisioning_model="STANDARD", automatic_restart=True, on_host_maintenance="TERMINATE")
        nic = compute_v1.NetworkInterface(network=self.settings.network)
        if self.settings.subnetwork:
            nic.subnetwork = self.settings.subnetwork
        if self.settings.external_ip:
            nic.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
        gpu_nics: list[compute_v1.NetworkInterface] = []
        if placement.uses_tcpx(spec.offer.instance_type, gang=spec.gang):
            nic.nic_type = "GVNIC"   # GCE requires gVNIC on every NIC of a multi-NIC A3 VM
            gpu_nics = placement.tcpx_interfaces(list(self.settings.gpu_networks))
        body = compute_v1.Instance(
            name=spec.name,
            machine_type=f"zones/{zone}/machineTypes/{machine}",
            labels=labels,
            disks=[compute_v1.AttachedDisk(
                boot=True, auto_delete=True, type_="PERSISTENT",
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    # The boot image (a GPU-ready DL VM); spec.image is the job's container, run on it by docker.
                    source_image=self.settings.image,
                    disk_size_gb=self.settings.disk_gb or spec.disk_gb,
                    disk_type=f"zones/{zone}/diskTypes/{self.settings.disk_type}", labels=labels))],
            network_interfaces=[nic, *gpu_nics],
            metadata=compute_v1.Metadata(items=items),
            scheduling=scheduling,
            tags=compute_v1.Tags(items=[network.network_tag(spec.owner)]),
        )
        if self.settings.service_account:
            body.service_accounts = [compute_v1.ServiceAccount(email=self.settings.service_account,
                                                               scopes=list(self.settings.service_account_scopes))]
        if placement_policy:
            body.resource_policies = [placement_policy]
        if accelerator:
            body.guest_accelerators = [compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{zone}/acceleratorTypes/{accelerator}", accelerator_count=count)]
        return body

    # --- Provider ------------------------------------------------------------------------------------
    def check_credentials(self) -> None:
        """ADC and a project must resolve, and the credentials may list instances in a configured zone."""
        instances, _, project = self._clients()
        zone = self.settings.zones[0] if self.settings.zones else "us-central1-a"
        request = compute_v1.ListInstancesRequest(project=project, zone=zone, max_results=1)
        self._call(lambda: next(iter(instances.list(request=request, retry=None, timeout=self.settings.timeout_s)
                                     .pages), None))

    def offers(self, req: GpuRequest) -> list[Offer]:
        """Catalog offers (GCE publishes no live prices or capacity), limited to the configured zones' regions."""
        regions = {z.rsplit("-", 1)[0] for z in self.settings.zones}
        catalog = [o for o in load_catalog().offers
                   if o.provider == "gcp" and (not regions or o.region in regions)]
        return match_offers(catalog, req)

    def launch(self, spec: LaunchSpec) -> Instance:
        """Create (or find) the VM; it carries the refreshed catalog's price at launch (GCE reports none)."""
        from dataclasses import replace

        from providers.catalog.loader import current_price_hr

        instance = self._launch(spec)
        return instance if instance.price_hr is not None else replace(instance, price_hr=current_price_hr(spec.offer))

    def _launch(self, spec: LaunchSpec) -> Instance:
        zone = self.settings.zone_for(spec.offer.region, spec.offer.zone)
        existing = self._fetch(zone, spec.name)
        if existing is not None:
            return self._to_instance(existing)
        gpu_nics = self.instance_body(spec, zone).network_interfaces[1:]   # refuses a TCPX gang before any insert
        # Always: the intra-tag rule lets a gang's nodes reach each other; SSH rules only where configured.
        rules = self._firewall_rules()
        rules.ensure(spec.owner, self.settings.network, self.settings.ssh_ingress_cidrs)
        policy = None
        if spec.gang:   # a multi-node gang: its VMs in one compact placement policy, its GPU networks open within
            for gpu_nic in gpu_nics:
                rules.ensure(spec.owner, gpu_nic.network, [])
            policy = self._placement_policies().ensure(zone.rsplit("-", 1)[0], owner=spec.owner, gang=spec.gang,
                                                       launch_id=spec.launch_id)
        try:
            self._insert(spec, zone, policy)
        except InstanceNotFoundError as exc:
            if policy is None or "resourcePolicies" not in str(exc):
                raise
            # Garbage collection removed the gang's (then unused) policy between the ensure and the insert.
            policy = self._placement_policies().ensure(zone.rsplit("-", 1)[0], owner=spec.owner, gang=spec.gang,
                                                       launch_id=spec.launch_id, again=True)
            self._insert(spec, zone, policy)
        created = self._fetch(zone, spec.name)
        if created is None:
            raise ProviderUnavailableError(f"insert of {spec.name} finished but the instance is not visible",
                                           provider="gcp")
        return self._to_instance(created)

    def _insert(self, spec: LaunchSpec, zone: str, policy: str | None) -> None:
        """Insert the VM and wait for the operation; ``alreadyExists`` (an earlier try made it) is success."""
        instances, _, project = self._clients()
        request = compute_v1.InsertInstanceRequest(
            project=project, zone=zone, request_id=request_id(spec.launch_id),
            instance_resource=self.instance_body(spec, zone, placement_policy=policy))
        try:
            # Retried inserts carry the same requestId: GCE answers with the first insert's operation.
            op = self._call(lambda: instances.insert_unary(request=request, retry=None,
                                                           timeout=self.settings.timeout_s))
            self._wait(zone, op)
        except InvalidRequestError as exc:
            if exc.code != "alreadyExists":
                raise

    def get(self, instance_id: str) -> Instance | None:
        try:
            zone, name = split_instance_id(instance_id)
        except InstanceNotFoundError:
            return None
        raw = self._fetch(zone, name)
        return self._to_instance(raw) if raw is not None else None

    def _owned_raw(self, owner: str) -> list[compute_v1.Instance]:
        instances, _, project = self._clients()
        request = compute_v1.AggregatedListInstancesRequest(
            project=project, filter=f'labels.{LABEL_OWNER} = "{label_value(owner)}"')

        def run() -> list[compute_v1.Instance]:
            pager = instances.aggregated_list(request=request, retry=None, timeout=self.settings.timeout_s)
            return [inst for _, scoped in pager for inst in scoped.instances]

        return self._call(run)

    def list_instances(self, owner: str) -> list[Instance]:
        return [self._to_instance(raw) for raw in self._owned_raw(owner)]

    def list_network_resources(self, owner: str) -> list[CloudResource]:
        """orch's firewall rules for ``owner`` (in use while an instance of the owner is on the network) and
        its compact placement policies (in use while an instance of the owner names one)."""
        raw = self._owned_raw(owner)
        return self._firewall_rules().owned(owner, raw) + self._placement_policies().owned(owner, raw)

    def delete_network_resource(self, resource: CloudResource) -> None:
        if resource.kind is ResourceKind.PLACEMENT_GROUP:
            self._placement_policies().delete(resource)
        else:
            self._firewall_rules().delete(resource.resource_id)

    def terminate(self, instance_id: str) -> None:
        """Ask GCE to delete the VM (and its boot disk, autoDelete); returns once the delete is accepted."""
        try:
            zone, name = split_instance_id(instance_id)
        except InstanceNotFoundError:
            return
        instances, _, project = self._clients()
        try:
            self._call(lambda: instances.delete_unary(project=project, zone=zone, instance=name, retry=None,
                                                      timeout=self.settings.timeout_s))
        except InstanceNotFoundError:
            return

    def stop(self, instance_id: str) -> None:
        """Stop the VM, keeping its disk (GCE then reports it TERMINATED, orch STOPPED)."""
        zone, name = split_instance_id(instance_id)
        instances, _, project = self._clients()
        self._call(lambda: instances.stop_unary(project=project, zone=zone, instance=name, retry=None,
                                                timeout=self.settings.timeout_s))

    def close(self) -> None:
        with self._lock:
            for client in (self._instances_client, self._operations_client, self._firewalls_client,
                           self._global_operations_client, self._policies_client, self._region_operations_client):
                if client is not None:
                    client.transport.close()
            self._instances_client = self._operations_client = None
            self._firewalls_client = self._global_operations_client = None
            self._policies_client = self._region_operations_client = None
