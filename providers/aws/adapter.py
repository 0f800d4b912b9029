"""The AWS EC2 adapter, on boto3.

Instance ids are ``"<region>/<ec2 instance id>"`` (``us-east-1/i-0abc...``): EC2 ids are only unique
within a region and every call needs the region, so the id carries it. An id that does not parse is
an instance orch never launched: ``get`` returns None, ``terminate`` succeeds.

botocore's own retries are switched off (``total_max_attempts=1``): transient errors are translated and
retried by providers.retry, so one policy with one deadline governs every call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from providers.aws import fabric as efa
from providers.aws import network, placement, run_instances
from providers.aws.errors import translate_error
from providers.aws.instances import decode_id, to_instance
from providers.aws.offers import live_offers, with_spot_price
from providers.aws.settings import Settings
from providers.base import (
    TAG_LAUNCH_ID,
    TAG_OWNER,
    Capability,
    CloudResource,
    GpuRequest,
    Instance,
    LaunchSpec,
    Market,
    Offer,
    Provider,
    ResourceKind,
)
from providers.errors import InstanceNotFoundError, InvalidRequestError, ResourceNotFoundError
from providers.retry import call_with_retry

T = TypeVar("T")

PROVIDER = "aws"

_ALIVE_STATES = ["pending", "running", "stopping", "stopped"]


class AwsProvider(Provider):
    """EC2 through boto3. See the module docstring for the instance id format."""

    name: ClassVar[str] = PROVIDER
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.SPOT, Capability.STOP, Capability.TAGS, Capability.LIVE_OFFERS,
        Capability.MULTI_NODE, Capability.PREEMPTION_NOTICE,
    })

    def __init__(self, settings: Settings, *, session: boto3.Session | None = None,
                 sleep: Callable[[float], None] | None = None) -> None:
        """``session`` is a seam for tests (a session holding moto's fake keys); normally boto3's default
        chain (env, ``settings.profile``, SSO, instance role) supplies credentials."""
        self.settings = settings
        self.policy = settings.retry_policy()
        self._sleep = sleep
        if session is None:
            session = boto3.Session(profile_name=settings.profile) if settings.profile else boto3.Session()
        self._session = session
        self._config = Config(retries={"total_max_attempts": 1, "mode": "standard"},
                              connect_timeout=settings.connect_timeout_s, read_timeout=settings.read_timeout_s)
        self._clients: dict[tuple[str, str], Any] = {}
        self._amis: dict[str, tuple[str, int]] = {}   # region -> (AMI id, its root snapshot's GB)
        self._lock = threading.Lock()

    # -- plumbing ---------------------------------------------------------------------------------------
    def _client(self, service: str, region: str) -> Any:
        with self._lock:
            key = (service, region)
            if key not in self._clients:
                self._clients[key] = self._session.client(
                    service, region_name=region, endpoint_url=self.settings.endpoint_url, config=self._config)
            return self._clients[key]

    def _call(self, fn: Callable[[], T]) -> T:
        """Run one SDK call: translate its errors, retry the transient ones under the policy."""
        def once() -> T:
            try:
                return fn()
            except Exception as exc:  # everything leaves through the taxonomy
                raise translate_error(exc) from exc
        if self._sleep is None:
            return call_with_retry(once, self.policy)
        return call_with_retry(once, self.policy, sleep=self._sleep)

    def _describe(self, region: str, **kwargs: Any) -> list[dict[str, Any]]:
        ec2 = self._client("ec2", region)

        def pages() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = []
            for page in ec2.get_paginator("describe_instances").paginate(**kwargs):
                for res in page.get("Reservations", []):
                    found.extend(res.get("Instances", []))
            return found
        return self._call(pages)

    # -- Provider ---------------------------------------------------------------------------------------
    def check_credentials(self) -> None:
        sts = self._client("sts", self.settings.regions[0])
        self._call(lambda: sts.get_caller_identity())

    def offers(self, req: GpuRequest) -> list[Offer]:
        """Catalog offers in the configured regions, GPU counts confirmed and spot prices made live (best
        effort: providers.aws.offers)."""
        return live_offers(req, self.settings.regions, ec2_for=lambda region: self._client("ec2", region),
                           call=self._call)

    def launch(self, spec: LaunchSpec) -> Instance:
        region = spec.offer.region
        if region not in self.settings.regions:
            raise InvalidRequestError(
                f"region {region} is not in aws.regions {self.settings.regions}: orch could not list "
                "(and so garbage-collect) an instance there", provider=PROVIDER)
        # Each attempt dedupes first: a retried RunInstances whose first try did land must not double it.
        try:
            instance = self._call(lambda: self._launch_once(spec, region))
        except ResourceNotFoundError as exc:
            if exc.code not in ("InvalidGroup.NotFound", "InvalidGroupId.NotFound", "InvalidPlacementGroup.Unknown"):
                raise
            # Garbage collection removed the unused group (security or placement) between ensure and
            # RunInstances: ensure again.
            instance = self._call(lambda: self._launch_once(spec, region))
        if instance.market is not Market.SPOT:
            return instance
        return with_spot_price(instance, self._client("ec2", instance.region), self._call)

    def _find_by_launch_id(self, region: str, launch_id: str) -> dict[str, Any] | None:
        found = self._describe(region, Filters=[
            {"Name": f"tag:{TAG_LAUNCH_ID}", "Values": [launch_id]},
            {"Name": "instance-state-name", "Values": _ALIVE_STATES},
        ])
        found.sort(key=lambda r: (str(r.get("LaunchTime", "")), r["InstanceId"]))
        return found[0] if found else None

    def _launch_once(self, spec: LaunchSpec, region: str) -> Instance:
        existing = self._find_by_launch_id(region, spec.launch_id)
        if existing is not None:
            return to_instance(region, existing, self.settings.ssh_user)
        ec2 = self._client("ec2", region)
        efa_count = efa.efa_interface_count(spec.offer.instance_type, gang=spec.gang)
        tags = run_instances.instance_tags(spec, efa_count=efa_count)
        # Looked up in this order: the AMI, the key pair, the security groups, the AZ's name, the placement group.
        image_id, root_floor_gb = self._ami(region)
        key_name = self.settings.key_name or self._import_key(region, spec, tags)
        groups = self._security_groups(ec2, spec.owner)
        zone_name = (self._zone_name(region, spec.offer.zone)
                     if not self.settings.subnet_id and spec.offer.zone else None)
        group_name = (placement.ensure_group(ec2, owner=spec.owner, gang=spec.gang, launch_id=spec.launch_id)
                      if spec.gang else None)
        params = run_instances.params(self.settings, spec, image_id=image_id, tags=tags, key_name=key_name,
                                      groups=groups, zone_name=zone_name, placement_group=group_name,
                                      efa_count=efa_count, root_floor_gb=root_floor_gb)
        reservation = ec2.run_instances(**params)
        return to_instance(region, reservation["Instances"][0], self.settings.ssh_user)

    def _security_groups(self, ec2: Any, owner: str) -> list[str]:
        """The configured groups, else orch's own group for this VPC (members reach each other; SSH only
        from ``ssh_ingress_cidrs``). Configured groups are taken as they are: they must admit the gang's
        traffic themselves (docs/providers/aws.md)."""
        if self.settings.security_group_ids:
            return list(self.settings.security_group_ids)
        vpc_id = network.vpc_of(ec2, self.settings.subnet_id)
        return [network.ensure_ssh_group(ec2, owner=owner, vpc_id=vpc_id, cidrs=self.settings.ssh_ingress_cidrs)]

    def _import_key(self, region: str, spec: LaunchSpec, tags: list[dict[str, str]]) -> str | None:
        """Import the spec's public key as key pair ``orch-<launch id>``; an existing one is reused."""
        if not spec.ssh_public_key:
            return None
        name = f"orch-{spec.launch_id}"
        ec2 = self._client("ec2", region)
        try:
            ec2.import_key_pair(KeyName=name, PublicKeyMaterial=spec.ssh_public_key.encode(),
                                TagSpecifications=[{"ResourceType": "key-pair", "Tags": tags}])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidKeyPair.Duplicate":
                raise
        return name

    def _ami(self, region: str) -> tuple[str, int]:
        """The region's AMI (``ami``, else the newest match) and its root snapshot's size in GB (0: unknown)."""
        if region in self._amis:
            return self._amis[region]
        ec2 = self._client("ec2", region)
        if self.settings.ami:
            try:
                images = ec2.describe_images(ImageIds=[self.settings.ami])["Images"]
            except ClientError as exc:   # not visible to this account: RunInstances will say so itself
                if not str(exc.response.get("Error", {}).get("Code", "")).startswith("InvalidAMIID"):
                    raise
                images = []
            image = images[0] if images else {"ImageId": self.settings.ami}
        else:
            images = ec2.describe_images(Owners=list(self.settings.ami_owners), Filters=[
                {"Name": "name", "Values": [self.settings.ami_name_pattern]},
                {"Name": "state", "Values": ["available"]},
                {"Name": "architecture", "Values": ["x86_64"]},
            ])["Images"]
            if not images:
                raise InvalidRequestError(
                    f"no AMI in {region} matches {self.settings.ami_name_pattern!r} (owners "
                    f"{self.settings.ami_owners}); set aws.ami", provider=PROVIDER)
            image = max(images, key=lambda i: (i.get("CreationDate", ""), i["ImageId"]))
        found = (str(image["ImageId"]), run_instances.snapshot_floor_gb(image, self.settings.root_device_name))
        self._amis[region] = found
        return found

    def _zone_name(self, region: str, zone: str) -> str:
        """The catalog names AZs by id (``use1-az2``, the same in every account); EC2 placement wants names."""
        if zone.startswith(region):
            return zone
        zones = self._client("ec2", region).describe_availability_zones(
            Filters=[{"Name": "zone-id", "Values": [zone]}])["AvailabilityZones"]
        if not zones:
            raise InvalidRequestError(f"availability zone {zone} is not in {region}", provider=PROVIDER)
        return str(zones[0]["ZoneName"])

    def get(self, instance_id: str) -> Instance | None:
        parsed = decode_id(instance_id)
        if parsed is None:
            return None
        region, ec2_id = parsed
        try:
            found = self._describe(region, InstanceIds=[ec2_id])
        except InstanceNotFoundError:
            return None
        return to_instance(region, found[0], self.settings.ssh_user) if found else None

    def list_instances(self, owner: str) -> list[Instance]:
        out: list[Instance] = []
        for region in self.settings.regions:
            for raw in self._describe(region, Filters=[{"Name": f"tag:{TAG_OWNER}", "Values": [owner]}]):
                out.append(to_instance(region, raw, self.settings.ssh_user))
        return out

    def terminate(self, instance_id: str) -> None:
        parsed = decode_id(instance_id)
        if parsed is None:
            return
        region, ec2_id = parsed
        ec2 = self._client("ec2", region)
        try:
            self._call(lambda: ec2.terminate_instances(InstanceIds=[ec2_id]))
        except InstanceNotFoundError:
            return

    def list_network_resources(self, owner: str) -> list[CloudResource]:
        """orch's security groups, imported key pairs and placement groups in every configured region."""
        out: list[CloudResource] = []
        for region in self.settings.regions:
            ec2 = self._client("ec2", region)
            out.extend(self._call(lambda ec2=ec2, region=region: network.list_resources(ec2, region, owner)))
            out.extend(self._call(lambda ec2=ec2, region=region: placement.list_groups(ec2, region, owner)))
        return out

    def delete_network_resource(self, resource: CloudResource) -> None:
        """Delete a security group or key pair; missing == success; ResourceInUseError while one is held."""
        region = resource.region or resource.resource_id.partition("/")[0]
        ec2 = self._client("ec2", region)
        try:
            if resource.kind is ResourceKind.PLACEMENT_GROUP:
                self._call(lambda: placement.delete_group(ec2, resource))
            else:
                self._call(lambda: network.delete_resource(ec2, resource))
        except ResourceNotFoundError:
            return

    def stop(self, instance_id: str) -> None:
        parsed = decode_id(instance_id)
        if parsed is None:
            raise InstanceNotFoundError(f"{instance_id} is not an orch AWS instance id", provider=PROVIDER)
        region, ec2_id = parsed
        ec2 = self._client("ec2", region)
        self._call(lambda: ec2.stop_instances(InstanceIds=[ec2_id]))

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
