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

import time
from collections.abc import Callable
from typing import ClassVar, TypeVar

from google.cloud import compute_v1

from providers.base import (
    LABEL_OWNER,
    Capability,
    CloudResource,
    GpuRequest,
    Instance,
    LaunchSpec,
    Offer,
    Provider,
    ResourceKind,
)
from providers.catalog import load_catalog, match_offers
from providers.errors import InstanceNotFoundError, InvalidRequestError, ProviderUnavailableError
from providers.gcp import network, placement
from providers.gcp.clients import GceClients
from providers.gcp.errors import translate_error
from providers.gcp.instances import PREEMPTED_OPERATION, split_instance_id, to_instance
from providers.gcp.operations import wait_done
from providers.gcp.settings import Settings
from providers.gcp.vm import image_ref, instance_body, label_value, request_id
from providers.retry import call_with_retry

T = TypeVar("T")


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
        self._sdk = GceClients(settings)
        self._image_gb: int | None = None   # settings.image's diskSizeGb, read once (0: not known)

    # --- plumbing ------------------------------------------------------------------------------------
    def _firewall_rules(self) -> network.FirewallRules:
        firewalls, _, project = self._sdk.firewalls()
        return network.FirewallRules(firewalls, project, call=self._call, wait=self._wait_global,
                                     timeout_s=self.settings.timeout_s)

    def _placement_policies(self) -> placement.PlacementPolicies:
        policies, _, project = self._sdk.policies()
        return placement.PlacementPolicies(policies, project, call=self._call, wait=self._wait_region,
                                           timeout_s=self.settings.timeout_s)

    def _wait_region(self, region: str, op: compute_v1.Operation) -> compute_v1.Operation:
        """``_wait`` for a region operation (resource policy changes)."""
        _, ops, project = self._sdk.policies()
        return wait_done(op, lambda name: self._call(lambda: ops.wait(
            project=project, region=region, operation=name, retry=None, timeout=self.settings.timeout_s)),
            clock=self._clock, timeout_s=self.settings.operation_timeout_s)

    def _wait_global(self, op: compute_v1.Operation) -> compute_v1.Operation:
        """``_wait`` for a global operation (firewall changes)."""
        _, ops, project = self._sdk.firewalls()
        return wait_done(op, lambda name: self._call(lambda: ops.wait(
            project=project, operation=name, retry=None, timeout=self.settings.timeout_s)),
            clock=self._clock, timeout_s=self.settings.operation_timeout_s)

    def _once(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except Exception as exc:
            raise translate_error(exc) from exc

    def _call(self, fn: Callable[[], T]) -> T:
        return call_with_retry(lambda: self._once(fn), self._policy)

    def _wait(self, zone: str, op: compute_v1.Operation) -> compute_v1.Operation:
        """Wait for a zone operation to be DONE (bounded by operation_timeout_s); raise its error translated."""
        _, ops, project = self._sdk.instances()
        return wait_done(op, lambda name: self._call(lambda: ops.wait(
            project=project, zone=zone, operation=name, retry=None, timeout=self.settings.timeout_s)),
            clock=self._clock, timeout_s=self.settings.operation_timeout_s)

    def _fetch(self, zone: str, name: str) -> compute_v1.Instance | None:
        instances, _, project = self._sdk.instances()
        try:
            return self._call(lambda: instances.get(project=project, zone=zone, instance=name, retry=None,
                                                    timeout=self.settings.timeout_s))
        except InstanceNotFoundError:
            return None

    def _image_size_gb(self) -> int:
        """settings.image's diskSizeGb (images.get / getFromFamily), read once; 0 when GCE does not know it (the
        insert then says why in GCE's words)."""
        if self._image_gb is None:
            ref = image_ref(self.settings.image)
            size = 0
            if ref is not None:
                images, own = self._sdk.images()
                project, key = ref[0] or own, ref[1]
                try:
                    image = self._call(lambda: images.get_from_family(
                        project=project, family=key[len("family/"):], retry=None, timeout=self.settings.timeout_s)
                        if key.startswith("family/") else images.get(project=project, image=key, retry=None,
                                                                     timeout=self.settings.timeout_s))
                    size = int(image.disk_size_gb or 0)
                except InstanceNotFoundError:
                    size = 0
            self._image_gb = size
        return self._image_gb

    def _was_preempted(self, zone: str, raw: compute_v1.Instance) -> bool:
        _, ops, project = self._sdk.instances()
        request = compute_v1.ListZoneOperationsRequest(
            project=project, zone=zone,
            filter=f'(operationType = "{PREEMPTED_OPERATION}") (targetLink = "{raw.self_link}")')

        def run() -> bool:
            return any(op.target_link == raw.self_link
                       for op in ops.list(request=request, retry=None, timeout=self.settings.timeout_s))

        return self._call(run)

    def _to_instance(self, raw: compute_v1.Instance) -> Instance:
        return to_instance(raw, ssh_user=self.settings.ssh_user, was_preempted=self._was_preempted)

    # --- Provider ------------------------------------------------------------------------------------
    def check_credentials(self) -> None:
        """ADC and a project must resolve, and the credentials may list instances in a configured zone."""
        instances, _, project = self._sdk.instances()
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
        # Building the body refuses a TCPX gang before any insert.
        gpu_nics = instance_body(self.settings, spec, zone).network_interfaces[1:]
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
        instances, _, project = self._sdk.instances()
        request = compute_v1.InsertInstanceRequest(
            project=project, zone=zone, request_id=request_id(spec.launch_id),
            instance_resource=instance_body(self.settings, spec, zone, placement_policy=policy,
                                            image_gb=self._image_size_gb()))
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
        instances, _, project = self._sdk.instances()
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
        instances, _, project = self._sdk.instances()
        try:
            self._call(lambda: instances.delete_unary(project=project, zone=zone, instance=name, retry=None,
                                                      timeout=self.settings.timeout_s))
        except InstanceNotFoundError:
            return

    def stop(self, instance_id: str) -> None:
        """Stop the VM, keeping its disk (GCE then reports it TERMINATED, orch STOPPED)."""
        zone, name = split_instance_id(instance_id)
        instances, _, project = self._sdk.instances()
        self._call(lambda: instances.stop_unary(project=project, zone=zone, instance=name, retry=None,
                                                timeout=self.settings.timeout_s))

    def close(self) -> None:
        self._sdk.close()
