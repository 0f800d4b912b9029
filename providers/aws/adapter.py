"""AWS EC2 on boto3: on-demand and spot multi-GPU instances, tagged with orch's launch id and owner.

Instance ids are ``<region>/<i-...>`` so that every call knows which regional endpoint to use.
Idempotency: RunInstances gets ClientToken = launch id, AND the adapter first looks for a live instance
tagged with that launch id, because a ClientToken is scoped to one region/account and not honoured by
every EC2-compatible endpoint (moto ignores it), and a retried call after a timeout must not double-buy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, TypeVar

import boto3
import botocore.exceptions
from botocore.config import Config

from providers.aws.settings import Settings
from providers.base import (
    TAG_JOB,
    TAG_LAUNCH_ID,
    TAG_OWNER,
    Availability,
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
    PriceTooLowError,
    ProviderError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)
from providers.retry import call_with_retry

T = TypeVar("T")

_STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "shutting-down": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPED,
    "terminated": InstanceState.TERMINATED,
}
#: StateReason codes with which EC2 itself ends a spot instance.
SPOT_REASONS = ("Server.SpotInstanceTermination", "Server.SpotInstanceShutdown")

_CAPACITY = {"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
             "InsufficientReservedInstanceCapacity", "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow",
             "Unsupported"}
_QUOTA = {"VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotFleetRequestCountExceeded",
          "InsufficientFreeAddressesInSubnet"}
_THROTTLE = {"RequestLimitExceeded", "Throttling", "ThrottlingException", "SlowDown"}
_AUTH = {"UnauthorizedOperation", "AuthFailure", "InvalidClientTokenId", "SignatureDoesNotMatch",
         "ExpiredToken", "OptInRequired", "Blocked", "PendingVerification"}
_NOT_FOUND = {"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"}
_UNAVAILABLE = {"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"}


def translate_error(exc: Exception) -> ProviderError:
    """The one place AWS errors become orch's taxonomy."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError
                  | botocore.exceptions.ProfileNotFound):
        return AuthError(str(exc), provider="aws",
                         hint="run `aws configure`, or set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
    if isinstance(exc, botocore.exceptions.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        message = str(err.get("Message", code))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code == "SpotMaxPriceTooLow":
            return PriceTooLowError(message, provider="aws", code=code)
        if code in _CAPACITY:
            return InsufficientCapacityError(message, provider="aws", code=code)
        if code in _QUOTA:
            return QuotaExceededError(message, provider="aws", code=code,
                                      hint="request a quota increase in the Service Quotas console")
        if code in _THROTTLE or status == 429:
            return RateLimitedError(message, provider="aws", code=code)
        if code in _AUTH or status in (401, 403):
            return AuthError(message, provider="aws", code=code, hint="check the IAM permissions of these credentials")
        if code in _NOT_FOUND:
            return InstanceNotFoundError(message, provider="aws", code=code)
        if code in _UNAVAILABLE or status >= 500:
            return ProviderUnavailableError(message, provider="aws", code=code)
        return InvalidRequestError(message, provider="aws", code=code)
    if isinstance(exc, botocore.exceptions.EndpointConnectionError | botocore.exceptions.ConnectionError
                  | botocore.exceptions.ReadTimeoutError | botocore.exceptions.ConnectTimeoutError):
        return ProviderUnavailableError(str(exc), provider="aws")
    if isinstance(exc, botocore.exceptions.BotoCoreError):
        return InvalidRequestError(str(exc), provider="aws")
    raise exc


def _split(instance_id: str) -> tuple[str, str]:
    region, sep, iid = instance_id.partition("/")
    if not sep or not iid.startswith("i-"):
        raise InstanceNotFoundError(f"not an orch AWS instance id: {instance_id!r}", provider="aws")
    return region, iid


def _tags(raw: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in raw.get("Tags", [])}


class AwsProvider(Provider):
    name: ClassVar[str] = "aws"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({
        Capability.SPOT, Capability.STOP, Capability.TAGS, Capability.LIVE_OFFERS, Capability.MULTI_NODE,
        Capability.PREEMPTION_NOTICE})

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._session = boto3.session.Session(profile_name=settings.profile)
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self._config = Config(retries={"total_max_attempts": 1, "mode": "standard"},
                              connect_timeout=settings.timeout_s, read_timeout=settings.timeout_s)
        self._policy = settings.retry_policy()
        self._zone_names: dict[str, dict[str, str]] = {}

    # --- plumbing ------------------------------------------------------------------------------------
    def _client(self, service: str, region: str) -> Any:
        with self._lock:
            key = (service, region)
            if key not in self._clients:
                self._clients[key] = self._session.client(service, region_name=region,
                                                          endpoint_url=self.settings.endpoint_url, config=self._config)
            return self._clients[key]

    def _call(self, fn: Callable[[], T]) -> T:
        def once() -> T:
            try:
                return fn()
            except Exception as exc:
                raise translate_error(exc) from exc

        return call_with_retry(once, self._policy)

    def _to_instance(self, region: str, raw: dict[str, Any]) -> Instance:
        tags = _tags(raw)
        raw_state = raw["State"]["Name"]
        reason = raw.get("StateReason", {}).get("Code") or None
        state = _STATES.get(raw_state, InstanceState.PENDING)
        market = Market.SPOT if raw.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND
        reclaimed = state in (InstanceState.TERMINATED, InstanceState.STOPPING, InstanceState.STOPPED)
        if reclaimed and reason in SPOT_REASONS:
            state = InstanceState.PREEMPTED
        return Instance(
            provider="aws", instance_id=f"{region}/{raw['InstanceId']}", launch_id=tags.get(TAG_LAUNCH_ID),
            owner=tags.get(TAG_OWNER), job=tags.get(TAG_JOB), state=state, instance_type=raw.get("InstanceType", ""),
            region=region, zone=raw.get("Placement", {}).get("AvailabilityZone"), market=market, raw_state=raw_state,
            raw_reason=reason, public_ip=raw.get("PublicIpAddress"), private_ip=raw.get("PrivateIpAddress"),
            ssh_user=self.settings.ssh_user, created_at=raw.get("LaunchTime"),
        )

    def _describe(self, region: str, **kwargs: Any) -> list[dict[str, Any]]:
        ec2 = self._client("ec2", region)

        def run() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for page in ec2.get_paginator("describe_instances").paginate(**kwargs):
                for reservation in page.get("Reservations", []):
                    out.extend(reservation.get("Instances", []))
            return out

        return self._call(run)

    # --- Provider ------------------------------------------------------------------------------------
    def check_credentials(self) -> None:
        sts = self._client("sts", self.settings.regions[0])
        self._call(lambda: sts.get_caller_identity())

    def offers(self, req: GpuRequest) -> list[Offer]:
        """Catalog offers for the configured regions, with spot prices replaced by live price history
        (the latest per availability zone, when it is fresher than ``spot_price_max_age_h``)."""
        catalog = [o for o in load_catalog().offers if o.provider == "aws" and o.region in self.settings.regions]
        found = match_offers(catalog, req)
        live: list[Offer] = []
        for region in self.settings.regions:
            spot_types = sorted({o.instance_type for o in found if o.region == region and o.market is Market.SPOT})
            if not spot_types:
                continue
            prices = self._spot_prices(region, spot_types)
            for o in found:
                if o.region == region and o.market is Market.SPOT and o.instance_type in prices:
                    for zone, price in sorted(prices[o.instance_type].items()):
                        live.append(Offer(o.provider, o.instance_type, region, zone, o.gpu, o.gpu_count, o.vram_gb,
                                          o.vcpus, o.memory_gb, o.interconnect, Market.SPOT, price,
                                          datetime.now(UTC).date(), False, "live", Availability.UNKNOWN))
        replaced = {(o.instance_type, o.region) for o in live}
        kept = [o for o in found if not (o.market is Market.SPOT and (o.instance_type, o.region) in replaced)]
        return match_offers([*kept, *live], req)

    def _spot_prices(self, region: str, instance_types: list[str]) -> dict[str, dict[str, float]]:
        ec2 = self._client("ec2", region)
        now = datetime.now(UTC)
        history = self._call(lambda: ec2.describe_spot_price_history(
            InstanceTypes=instance_types, ProductDescriptions=["Linux/UNIX"], StartTime=now))
        fresh_after = now - timedelta(hours=self.settings.spot_price_max_age_h)
        latest: dict[tuple[str, str], tuple[datetime, float]] = {}
        for row in history.get("SpotPriceHistory", []):
            ts = row["Timestamp"]
            if ts < fresh_after:
                continue  # stale history is not a live price
            key = (row["InstanceType"], row["AvailabilityZone"])
            if key not in latest or ts > latest[key][0]:
                latest[key] = (ts, float(row["SpotPrice"]))
        out: dict[str, dict[str, float]] = {}
        for (itype, zone), (_, price) in latest.items():
            out.setdefault(itype, {})[zone] = price
        return out

    def _ami(self, region: str) -> str:
        if region in self.settings.amis:
            return self.settings.amis[region]
        ec2 = self._client("ec2", region)
        images = self._call(lambda: ec2.describe_images(
            Owners=["amazon"], Filters=[{"Name": "name", "Values": [self.settings.ami_name_pattern]},
                                        {"Name": "state", "Values": ["available"]}])).get("Images", [])
        if not images:
            raise InvalidRequestError(f"no AMI matches {self.settings.ami_name_pattern!r} in {region}",
                                      provider="aws", hint=f"set providers.aws.amis.{region} in orch's config")
        return str(max(images, key=lambda i: i.get("CreationDate", ""))["ImageId"])

    def _zone_name(self, region: str, zone: str | None) -> str | None:
        """The catalog names zones by AZ id (use1-az1); RunInstances wants the account's AZ name."""
        if not zone:
            return None
        if region not in self._zone_names:
            ec2 = self._client("ec2", region)
            zones = self._call(lambda: ec2.describe_availability_zones()).get("AvailabilityZones", [])
            self._zone_names[region] = {z.get("ZoneId", ""): z["ZoneName"] for z in zones} | {
                z["ZoneName"]: z["ZoneName"] for z in zones}
        return self._zone_names[region].get(zone)

    def _key_name(self, region: str, spec: LaunchSpec) -> str | None:
        if self.settings.key_name:
            return self.settings.key_name
        if not spec.ssh_public_key:
            return None
        name = f"orch-{spec.owner}"
        ec2 = self._client("ec2", region)
        try:
            self._call(lambda: ec2.import_key_pair(KeyName=name, PublicKeyMaterial=spec.ssh_public_key.encode()))
        except InvalidRequestError as exc:
            if exc.code != "InvalidKeyPair.Duplicate":
                raise
        return name

    def _find_by_launch_id(self, region: str, launch_id: str) -> Instance | None:
        found = self._describe(region, Filters=[
            {"Name": f"tag:{TAG_LAUNCH_ID}", "Values": [launch_id]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}])
        return self._to_instance(region, found[0]) if found else None

    def launch(self, spec: LaunchSpec) -> Instance:
        region = spec.offer.region
        existing = self._find_by_launch_id(region, spec.launch_id)
        if existing is not None:
            return existing
        tags = [{"Key": TAG_LAUNCH_ID, "Value": spec.launch_id}, {"Key": TAG_OWNER, "Value": spec.owner},
                {"Key": TAG_JOB, "Value": spec.job}, {"Key": "Name", "Value": spec.name}]
        params: dict[str, Any] = {
            "ImageId": self._ami(region), "InstanceType": spec.offer.instance_type, "MinCount": 1, "MaxCount": 1,
            "ClientToken": spec.launch_id,
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags},
                                  {"ResourceType": "volume", "Tags": tags}],
            "BlockDeviceMappings": [{"DeviceName": self.settings.root_device,
                                     "Ebs": {"VolumeSize": spec.disk_gb, "VolumeType": "gp3",
                                             "DeleteOnTermination": True}}],
            "InstanceInitiatedShutdownBehavior": "terminate",
        }
        if spec.startup_script:
            params["UserData"] = spec.startup_script   # botocore base64-encodes RunInstances UserData itself
        key = self._key_name(region, spec)
        if key:
            params["KeyName"] = key
        if self.settings.security_group_ids:
            params["SecurityGroupIds"] = list(self.settings.security_group_ids)
        if region in self.settings.subnet_ids:
            params["SubnetId"] = self.settings.subnet_ids[region]
        zone = self._zone_name(region, spec.offer.zone)
        if zone and region not in self.settings.subnet_ids:
            params["Placement"] = {"AvailabilityZone": zone}
        if spec.offer.market is Market.SPOT:
            options: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
            if spec.max_price_hr:
                options["MaxPrice"] = f"{spec.max_price_hr:.4f}"
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": options}
        ec2 = self._client("ec2", region)

        def run() -> Instance:
            # A retry after a lost answer must not buy a second machine: look again before each call.
            again = self._find_by_launch_id(region, spec.launch_id)
            if again is not None:
                return again
            try:
                out = ec2.run_instances(**params)
            except Exception as exc:
                raise translate_error(exc) from exc
            return self._to_instance(region, out["Instances"][0])

        return call_with_retry(run, self._policy)

    def get(self, instance_id: str) -> Instance | None:
        region, iid = _split(instance_id)
        try:
            found = self._describe(region, InstanceIds=[iid])
        except InstanceNotFoundError:
            return None
        return self._to_instance(region, found[0]) if found else None

    def list_instances(self, owner: str) -> list[Instance]:
        out: list[Instance] = []
        for region in self.settings.regions:
            for raw in self._describe(region, Filters=[{"Name": f"tag:{TAG_OWNER}", "Values": [owner]}]):
                out.append(self._to_instance(region, raw))
        return out

    def terminate(self, instance_id: str) -> None:
        region, iid = _split(instance_id)
        ec2 = self._client("ec2", region)
        try:
            self._call(lambda: ec2.terminate_instances(InstanceIds=[iid]))
        except InstanceNotFoundError:
            return

    def stop(self, instance_id: str) -> None:
        region, iid = _split(instance_id)
        ec2 = self._client("ec2", region)
        self._call(lambda: ec2.stop_instances(InstanceIds=[iid]))

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
