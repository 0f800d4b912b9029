"""Google Compute Engine on google-cloud-compute (REST transport).

Ids are ``<zone>/<name>``; the name is ``instance_name(owner, launch_id)`` and the labels carry
orch-launch-id / orch-owner / orch-job. Inserts carry a requestId derived from the launch id (uuid5),
so GCE itself dedupes a retried insert; a GET by name before inserting makes a repeat launch return
the existing VM. Operations are waited for with our own ZoneOperationsClient (the SDK's
``insert(...).result()`` builds one that ignores client_options and would call googleapis.com).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from providers.base import (
    LABEL_JOB,
    LABEL_LAUNCH_ID,
    LABEL_OWNER,
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
from providers.gcp.settings import Settings
from providers.retry import call_with_retry

T = TypeVar("T")
_NS = uuid.UUID("6f0b7f0e-2f59-4c1e-9a55-0d3f6b8f2a11")
_PREEMPTED = "compute.instances.preempted"
_ACCELERATORS = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
                 "P4": "nvidia-tesla-p4", "L4": "nvidia-l4"}
_N1 = re.compile(r"^(?P<machine>n1-[a-z]+-\d+)\+(?P<count>\d+)x(?P<gpu>[A-Z0-9]+)$")
_STATES = {
    "PROVISIONING": InstanceState.PENDING, "STAGING": InstanceState.PENDING, "PENDING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING, "REPAIRING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING, "SUSPENDING": InstanceState.STOPPING, "PENDING_STOP": InstanceState.STOPPING,
    "DEPROVISIONING": InstanceState.STOPPING,
    "STOPPED": InstanceState.STOPPED, "SUSPENDED": InstanceState.STOPPED, "TERMINATED": InstanceState.STOPPED,
}
_CAPACITY_CODES = {"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                   "RESOURCE_POOL_EXHAUSTED", "STOCKOUT", "RESOURCE_NOT_AVAILABLE"}
_QUOTA_CODES = {"QUOTA_EXCEEDED", "quotaExceeded", "QUOTA_LIMIT"}


def translate_error(exc: Exception) -> ProviderError:
    """The one place GCE errors (HTTP errors and operation errors) become orch's taxonomy."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, gexc.GoogleAPICallError):
        reasons = {str(e.get("reason", "")) for e in (exc.errors or []) if isinstance(e, dict)}
        status = int(exc.code or 0)
        msg = exc.message or str(exc)
        code = next(iter(reasons), None)
        if reasons & {"rateLimitExceeded", "userRateLimitExceeded"} or status == 429:
            return RateLimitedError(msg, provider="gcp", code=code)
        if reasons & _QUOTA_CODES:
            return QuotaExceededError(msg, provider="gcp", code=code)
        if status in (401, 403):
            return AuthError(msg, provider="gcp", code=code,
                             hint="run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS")
        if status == 404:
            return InstanceNotFoundError(msg, provider="gcp", code=code)
        if status >= 500:
            return ProviderUnavailableError(msg, provider="gcp", code=code)
        return InvalidRequestError(msg, provider="gcp", code=code)
    if isinstance(exc, gexc.RetryError | gexc.GoogleAPIError | ConnectionError | TimeoutError):
        return ProviderUnavailableError(str(exc), provider="gcp")
    try:
        import google.auth.exceptions as aexc

        if isinstance(exc, aexc.DefaultCredentialsError | aexc.RefreshError):
            return AuthError(str(exc), provider="gcp",
                             hint="run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS")
        if isinstance(exc, aexc.TransportError):
            return ProviderUnavailableError(str(exc), provider="gcp")
    except ImportError:
        pass
    import requests

    if isinstance(exc, requests.RequestException):
        return ProviderUnavailableError(str(exc), provider="gcp")
    raise exc


def operation_error(op: compute_v1.Operation) -> ProviderError | None:
    """A finished operation's error, translated (capacity and quota arrive this way)."""
    if not op.error or not op.error.errors:
        return None
    first = op.error.errors[0]
    msg = f"{first.code}: {first.message}"
    if first.code in _CAPACITY_CODES:
        return InsufficientCapacityError(msg, provider="gcp", code=first.code)
    if first.code in _QUOTA_CODES:
        return QuotaExceededError(msg, provider="gcp", code=first.code)
    status = int(op.http_error_status_code or 0)
    if status >= 500:
        return ProviderUnavailableError(msg, provider="gcp", code=first.code)
    return InvalidRequestError(msg, provider="gcp", code=first.code)


def machine_and_accelerators(instance_type: str, zone: str) -> tuple[str, list[compute_v1.AcceleratorConfig]]:
    """Catalog names like ``n1-standard-8+4xT4`` are an N1 VM plus attached GPUs; a2/a3/g2 carry theirs."""
    m = _N1.match(instance_type)
    if not m:
        return instance_type, []
    accel = compute_v1.AcceleratorConfig(
        accelerator_count=int(m.group("count")),
        accelerator_type=f"zones/{zone}/acceleratorTypes/{_ACCELERATORS[m.group('gpu')]}")
    return m.group("machine"), [accel]


def _split(instance_id: str) -> tuple[str, str]:
    zone, sep, name = instance_id.partition("/")
    if not sep or not name:
        raise InstanceNotFoundError(f"not an orch GCP instance id: {instance_id!r}", provider="gcp")
    return zone, name


class GcpProvider(Provider):
    name: ClassVar[str] = "gcp"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.SPOT, Capability.STOP, Capability.TAGS, Capability.MULTI_NODE, Capability.PREEMPTION_NOTICE})

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._policy = settings.retry_policy()
        self._instances: compute_v1.InstancesClient | None = None
        self._operations: compute_v1.ZoneOperationsClient | None = None

    # --- plumbing ------------------------------------------------------------------------------------
    def _clients(self) -> tuple[compute_v1.InstancesClient, compute_v1.ZoneOperationsClient]:
        if self._instances is None or self._operations is None:
            kwargs: dict[str, Any] = {}
            if self.settings.api_endpoint:
                kwargs["client_options"] = {"api_endpoint": self.settings.api_endpoint}
            if self.settings.anonymous_credentials:
                from google.auth.credentials import AnonymousCredentials

                kwargs["credentials"] = AnonymousCredentials()
            self._instances = compute_v1.InstancesClient(**kwargs)
            self._operations = compute_v1.ZoneOperationsClient(**kwargs)
        return self._instances, self._operations

    @property
    def project(self) -> str:
        if self.settings.project:
            return self.settings.project
        try:
            import google.auth

            _, project = google.auth.default()
        except Exception as exc:
            raise translate_error(exc) from exc
        if not project:
            raise AuthError("no GCP project configured", provider="gcp",
                            hint="set providers.gcp.project in orch's config or GOOGLE_CLOUD_PROJECT")
        return str(project)

    def _call(self, fn: Callable[[], T]) -> T:
        def once() -> T:
            try:
                return fn()
            except Exception as exc:
                raise translate_error(exc) from exc

        return call_with_retry(once, self._policy)

    def _wait(self, zone: str, op: compute_v1.Operation) -> None:
        _, ops = self._clients()
        deadline = time.monotonic() + self.settings.operation_timeout_s
        while op.status != compute_v1.Operation.Status.DONE:
            if time.monotonic() > deadline:
                raise ProviderUnavailableError(f"operation {op.name} did not finish", provider="gcp")
            op = self._call(lambda name=op.name: ops.wait(project=self.project, zone=zone, operation=name,
                                                          retry=None, timeout=self.settings.timeout_s))
        error = operation_error(op)
        if error is not None:
            raise error

    def _zone_for(self, offer: Offer) -> str:
        if offer.zone:
            return offer.zone
        for zone in self.settings.zones:
            if zone.rsplit("-", 1)[0] == offer.region:
                return zone
        return f"{offer.region}-a"

    def _preempted(self, zone: str, link: str) -> bool:
        _, ops = self._clients()
        request = compute_v1.ListZoneOperationsRequest(
            project=self.project, zone=zone, filter=f'operationType = "{_PREEMPTED}"')
        found = self._call(lambda: list(ops.list(request=request, retry=None, timeout=self.settings.timeout_s)))
        return any(o.target_link == link for o in found)

    def _to_instance(self, zone: str, raw: compute_v1.Instance, *, check_preempted: bool = True) -> Instance:
        labels = dict(raw.labels)
        spot = raw.scheduling.provisioning_model == "SPOT" or bool(raw.scheduling.preemptible)
        state = _STATES.get(raw.status, InstanceState.PENDING)
        reason: str | None = None
        if spot and raw.status == "TERMINATED" and check_preempted and self._preempted(zone, raw.self_link):
            state, reason = InstanceState.PREEMPTED, _PREEMPTED
        ip = None
        for nic in raw.network_interfaces:
            for ac in nic.access_configs:
                ip = ip or (ac.nat_i_p or None)
        created = None
        if raw.creation_timestamp:
            try:
                created = datetime.fromisoformat(raw.creation_timestamp)
            except ValueError:
                created = None
        return Instance(
            provider="gcp", instance_id=f"{zone}/{raw.name}", launch_id=labels.get(LABEL_LAUNCH_ID),
            owner=labels.get(LABEL_OWNER), job=labels.get(LABEL_JOB), state=state,
            instance_type=raw.machine_type.rsplit("/", 1)[-1], region=zone.rsplit("-", 1)[0], zone=zone,
            market=Market.SPOT if spot else Market.ON_DEMAND, raw_state=raw.status, raw_reason=reason,
            public_ip=ip, private_ip=(raw.network_interfaces[0].network_i_p if raw.network_interfaces else None),
            ssh_user=self.settings.ssh_user, created_at=created)

    # --- Provider ------------------------------------------------------------------------------------
    def check_credentials(self) -> None:
        instances, _ = self._clients()
        zone = self.settings.zones[0] if self.settings.zones else "us-central1-a"
        request = compute_v1.ListInstancesRequest(project=self.project, zone=zone, max_results=1)
        self._call(lambda: list(instances.list(request=request, retry=None, timeout=self.settings.timeout_s)))

    def offers(self, req: GpuRequest) -> list[Offer]:
        """Catalog offers (GCE's prices come from the Cloud Billing catalog, not the compute API)."""
        return match_offers([o for o in load_catalog().offers if o.provider == "gcp"], req)

    def _get_raw(self, zone: str, name: str) -> compute_v1.Instance | None:
        instances, _ = self._clients()
        try:
            return self._call(lambda: instances.get(project=self.project, zone=zone, instance=name, retry=None,
                                                    timeout=self.settings.timeout_s))
        except InstanceNotFoundError:
            return None

    def launch(self, spec: LaunchSpec) -> Instance:
        zone = self._zone_for(spec.offer)
        existing = self._get_raw(zone, spec.name)
        if existing is not None:
            return self._to_instance(zone, existing, check_preempted=False)
        machine, accelerators = machine_and_accelerators(spec.offer.instance_type, zone)
        scheduling = compute_v1.Scheduling(on_host_maintenance="TERMINATE", automatic_restart=False)
        if spec.offer.market is Market.SPOT:
            scheduling.provisioning_model = "SPOT"
            scheduling.instance_termination_action = self.settings.spot_termination_action
        items = [compute_v1.Items(key="startup-script", value=spec.startup_script)] if spec.startup_script else []
        if spec.ssh_public_key:
            items.append(compute_v1.Items(key="ssh-keys", value=f"{self.settings.ssh_user}:{spec.ssh_public_key}"))
        body = compute_v1.Instance(
            name=spec.name, machine_type=f"zones/{zone}/machineTypes/{machine}",
            labels={LABEL_LAUNCH_ID: spec.launch_id, LABEL_OWNER: spec.owner, LABEL_JOB: spec.job[:63]},
            scheduling=scheduling, guest_accelerators=accelerators, metadata=compute_v1.Metadata(items=items),
            disks=[compute_v1.AttachedDisk(
                boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=self.settings.image, disk_size_gb=spec.disk_gb))],
            network_interfaces=[compute_v1.NetworkInterface(network=self.settings.network, access_configs=[
                compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")])],
        )
        request = compute_v1.InsertInstanceRequest(project=self.project, zone=zone, instance_resource=body,
                                                   request_id=str(uuid.uuid5(_NS, spec.launch_id)))
        instances, _ = self._clients()

        def insert() -> compute_v1.Operation:
            try:
                return instances.insert_unary(request=request, retry=None, timeout=self.settings.timeout_s)
            except gexc.Conflict:
                return compute_v1.Operation(status=compute_v1.Operation.Status.DONE)   # already there: ours
            except Exception as exc:
                raise translate_error(exc) from exc

        op = call_with_retry(insert, self._policy)
        self._wait(zone, op)
        raw = self._get_raw(zone, spec.name)
        if raw is None:
            raise ProviderUnavailableError(f"{spec.name} not visible after its insert finished", provider="gcp")
        return self._to_instance(zone, raw, check_preempted=False)

    def get(self, instance_id: str) -> Instance | None:
        zone, name = _split(instance_id)
        raw = self._get_raw(zone, name)
        return self._to_instance(zone, raw) if raw is not None else None

    def list_instances(self, owner: str) -> list[Instance]:
        instances, _ = self._clients()
        request = compute_v1.AggregatedListInstancesRequest(project=self.project,
                                                            filter=f'labels.{LABEL_OWNER} = "{owner}"')
        pages = self._call(lambda: list(instances.aggregated_list(request=request, retry=None,
                                                                  timeout=self.settings.timeout_s)))
        out: list[Instance] = []
        for scope, scoped in pages:
            zone = scope.rsplit("/", 1)[-1]
            for raw in scoped.instances:
                out.append(self._to_instance(zone, raw))
        return out

    def terminate(self, instance_id: str) -> None:
        zone, name = _split(instance_id)
        instances, _ = self._clients()
        try:
            op = self._call(lambda: instances.delete_unary(project=self.project, zone=zone, instance=name, retry=None,
                                                           timeout=self.settings.timeout_s))
        except InstanceNotFoundError:
            return
        self._wait(zone, op)

    def stop(self, instance_id: str) -> None:
        zone, name = _split(instance_id)
        instances, _ = self._clients()
        op = self._call(lambda: instances.stop_unary(project=self.project, zone=zone, instance=name, retry=None,
                                                     timeout=self.settings.timeout_s))
        self._wait(zone, op)

    def close(self) -> None:
        for client in (self._instances, self._operations):
            if client is not None:
                client.transport.close()
        self._instances = self._operations = None
