"""One compact placement policy per gang (the nodes of one start of a multi-node job) on GCE, so its VMs sit
close together on the network, and the GPU NICs an A3 High gang needs for GPUDirect-TCPX.

Placement:

* A regional resource policy ``orch-<owner>-<gang>`` (a valid GCE name) with ``groupPlacementPolicy:
  {collocation: COLLOCATED}`` (no ``maxDistance``: best effort, so a gang is not refused where the zone has
  room but not one block), in the region of the gang's zone. Resource policies carry no labels: the
  description says ``orch owner=<owner> gang=<gang> launch=<launch id>`` (the node that created it), and that
  is how orch recognises its own. Every node's launch GETs it and inserts it when missing (the insert's
  requestId derives from project, region and name, and ``alreadyExists`` from a concurrent node means "found").
* Each instance of the gang names it in ``resourcePolicies``. GCE refuses to delete a policy an instance
  still uses (``resourceInUseByAnotherResource``); a policy is in use while an instance of the owner names it,
  and garbage collection (providers.leftovers) deletes it after.
* A single-node launch asks for no policy.
https://cloud.google.com/compute/docs/instances/use-compact-placement-policies

GPUDirect-TCPX (A3 High, ``a3-highgpu-8g``): besides the primary NIC (host traffic), four more gVNIC NICs,
each on its own VPC network and subnet (GCE allows one NIC per network), carry the GPU-to-GPU traffic; the
primary NIC is gVNIC too. orch does not create those networks: ``providers.gcp.gpu_networks`` names them
(docs/providers/gcp.md), and orch keeps its intra-tag firewall rule on each of them so the gang's nodes reach
each other there too. https://cloud.google.com/compute/docs/gpus/gpudirect
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from google.cloud import compute_v1

from providers.base import CloudResource, ResourceKind
from providers.errors import InvalidRequestError, ResourceNotFoundError
from providers.fabric import Fabric, instance_fabric
from providers.gcp.settings import TCPX_GPU_NICS

T = TypeVar("T")
COLLOCATED = "COLLOCATED"
#: uuid5 namespace for resource policy insert requestIds.
POLICY_REQUEST_NAMESPACE = uuid.UUID("3c1f6a52-8d0e-4f9b-a7c4-5e2d9b0f1a63")
_DESCRIPTION = re.compile(r"^orch owner=(?P<owner>\S+) gang=(?P<gang>\S+) launch=(?P<launch>\S+)$")


def policy_name(owner: str, gang: str) -> str:
    """``orch-<owner>-<gang>`` as a GCE name: lowercase letters, digits and '-', at most 63, no trailing '-'."""
    return re.sub(r"[^a-z0-9-]", "-", f"orch-{owner}-{gang}".lower())[:63].rstrip("-")


def policy_url(project: str, region: str, name: str) -> str:
    """The partial URL an instance names in ``resourcePolicies``."""
    return f"projects/{project}/regions/{region}/resourcePolicies/{name}"


def policy_body(name: str, *, owner: str, gang: str, launch_id: str) -> compute_v1.ResourcePolicy:
    """The insert body (the region is the request's; the body's ``region`` is output only)."""
    return compute_v1.ResourcePolicy(
        name=name, description=f"orch owner={owner} gang={gang} launch={launch_id}",
        group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(collocation=COLLOCATED))


def owned_by(policy: compute_v1.ResourcePolicy, owner: str) -> dict[str, str] | None:
    """The policy's orch description fields when it is ``owner``'s compact placement policy, else None."""
    m = _DESCRIPTION.match(policy.description or "")
    if m is None or m.group("owner") != owner or not policy.group_placement_policy.collocation:
        return None
    return m.groupdict()


def tcpx_type(instance_type: str) -> bool:
    """Whether the machine type reaches its peers over GPUDirect-TCPX (A3 High) given the GPU NICs."""
    fact = instance_fabric("gcp", instance_type)
    return fact is not None and fact.fabric is Fabric.GPUDIRECT_TCPX


def uses_tcpx(instance_type: str, *, gang: str) -> bool:
    """Whether a launch of ``instance_type`` gets the GPUDirect-TCPX NICs: a multi-node gang on A3 High."""
    return bool(gang) and tcpx_type(instance_type)


def tcpx_interfaces(gpu_networks: list[Any]) -> list[compute_v1.NetworkInterface]:
    """The four GPU NICs (gVNIC, no external address) on the configured GPU networks, in order."""
    if len(gpu_networks) != TCPX_GPU_NICS:
        raise InvalidRequestError(
            f"a multi-node a3-highgpu-8g gang needs {TCPX_GPU_NICS} GPU networks for GPUDirect-TCPX; "
            f"providers.gcp.gpu_networks names {len(gpu_networks)}", provider="gcp",
            hint="create four VPC networks with one subnet each in the gang's region and list them in "
                 "providers.gcp.gpu_networks (docs/providers/gcp.md), or pick another machine type")
    return [compute_v1.NetworkInterface(network=g.network, subnetwork=g.subnetwork, nic_type="GVNIC")
            for g in gpu_networks]


class PlacementPolicies:
    """The resource policy calls, each through the adapter's ``call`` (translate + retry) and ``wait``."""

    def __init__(self, client: compute_v1.ResourcePoliciesClient, project: str, *,
                 call: Callable[[Callable[[], T]], T],
                 wait: Callable[[str, compute_v1.Operation], compute_v1.Operation], timeout_s: float) -> None:
        self._client = client
        self._project = project
        self._call: Callable[[Callable[[], Any]], Any] = call
        self._wait = wait
        self._timeout_s = timeout_s

    def ensure(self, region: str, *, owner: str, gang: str, launch_id: str, again: bool = False) -> str:
        """The partial URL of ``gang``'s compact placement policy in ``region``, inserted when missing.
        ``again``: the policy was deleted since an earlier insert, whose requestId GCE would answer with that
        insert's operation instead of inserting anew, so this insert carries a requestId of its own."""
        name = policy_name(owner, gang)
        if self._get(region, name) is None:
            body = policy_body(name, owner=owner, gang=gang, launch_id=launch_id)
            key = f"{self._project}/{region}/{name}" + (f"/{launch_id}/again" if again else "")
            request = compute_v1.InsertResourcePolicyRequest(
                project=self._project, region=region, resource_policy_resource=body,
                request_id=str(uuid.uuid5(POLICY_REQUEST_NAMESPACE, key)))
            try:
                self._wait(region, self._call(lambda: self._client.insert_unary(
                    request=request, retry=None, timeout=self._timeout_s)))
            except InvalidRequestError as exc:
                if exc.code != "alreadyExists":   # another node of the gang made it first: the same policy
                    raise
        return policy_url(self._project, region, name)

    def _get(self, region: str, name: str) -> compute_v1.ResourcePolicy | None:
        try:
            policy: compute_v1.ResourcePolicy = self._call(lambda: self._client.get(
                project=self._project, region=region, resource_policy=name, retry=None, timeout=self._timeout_s))
            return policy
        except ResourceNotFoundError:
            return None

    def owned(self, owner: str, instances: list[compute_v1.Instance]) -> list[CloudResource]:
        """This owner's compact placement policies in every region, each in use while one of ``instances``
        (the owner's) names it."""
        def run() -> list[compute_v1.ResourcePolicy]:
            pager = self._client.aggregated_list(project=self._project, retry=None, timeout=self._timeout_s)
            return [p for _, scoped in pager for p in scoped.resource_policies]

        used = {_tail(url) for inst in instances for url in inst.resource_policies}
        out: list[CloudResource] = []
        for p in self._call(run):
            fields = owned_by(p, owner)
            if fields is None:
                continue
            region = _tail(p.region)
            out.append(CloudResource(
                provider="gcp", kind=ResourceKind.PLACEMENT_GROUP, resource_id=f"{region}/{p.name}", name=p.name,
                owner=owner, in_use=f"{region}/{p.name}" in used, launch_id=fields["launch"], region=region,
                created_at=datetime.fromisoformat(p.creation_timestamp) if p.creation_timestamp else None))
        return out

    def delete(self, resource: CloudResource) -> None:
        """Delete a policy; missing == success; in use -> ResourceInUseError (translated by the adapter)."""
        region, _, name = resource.resource_id.partition("/")
        try:
            self._wait(region, self._call(lambda: self._client.delete_unary(
                project=self._project, region=region, resource_policy=name, retry=None, timeout=self._timeout_s)))
        except ResourceNotFoundError:
            return


def _tail(url: str) -> str:
    """``.../regions/R/resourcePolicies/N`` -> ``R/N`` (full or partial URL); a region URL -> its name."""
    parts = url.rstrip("/").split("/")
    if "resourcePolicies" in parts:
        i = parts.index("resourcePolicies")
        return f"{parts[i - 1]}/{parts[i + 1]}"
    return parts[-1]
