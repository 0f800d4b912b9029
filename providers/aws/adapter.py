"""The AWS EC2 adapter, on boto3.

Instance ids are ``"<region>/<ec2 instance id>"`` (``us-east-1/i-0abc...``): EC2 ids are only unique
within a region and every call needs the region, so the id carries it. An id that does not parse is
an instance orch never launched: ``get`` returns None, ``terminate`` succeeds.

botocore's own retries are switched off (``total_max_attempts=1``): transient errors are translated and
retried by providers.retry, so one policy with one deadline governs every call.
"""

from __future__ import annotations

import gzip
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, date, datetime
from typing import Any, ClassVar, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from providers.aws import fabric as efa
from providers.aws import network, placement
from providers.aws.settings import Settings
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
    ResourceInUseError,
    ResourceNotFoundError,
)
from providers.retry import call_with_retry

log = logging.getLogger(__name__)
T = TypeVar("T")

def user_data(script: str) -> bytes | str:
    """EC2's UserData for a boot script: gzip'd (cloud-init, on every AMI orch boots, decompresses gzip user data
    and runs the script in it), because EC2 takes 16 KB before base64 and orch's script is mostly base85 text,
    which gzip brings back by a fifth. Deterministic (mtime 0). Empty stays empty."""
    return gzip.compress(script.encode(), compresslevel=9, mtime=0) if script else ""


PROVIDER = "aws"
AUTH_HINT = "run `aws configure` or set AWS_PROFILE / AWS_ACCESS_KEY_ID"

# State reason codes EC2 gives an instance the spot market reclaimed (terminate / stop-hibernate behaviour).
SPOT_REASON_CODES = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})
_STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "shutting-down": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPED,
    "terminated": InstanceState.TERMINATED,
}
_ALIVE_STATES = ["pending", "running", "stopping", "stopped"]

_CAPACITY = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
                       "InsufficientReservedInstanceCapacity", "MaxSpotInstanceCountExceeded",
                       "SpotCapacityNotAvailable"})
_QUOTA = frozenset({"VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotFleetRequestCountExceeded",
                    "ResourceLimitExceeded"})
_THROTTLE = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
                       "RequestThrottled", "SlowDown"})
_AUTH = frozenset({"UnauthorizedOperation", "AuthFailure", "InvalidClientTokenId", "SignatureDoesNotMatch",
                   "ExpiredToken", "ExpiredTokenException", "AccessDenied", "AccessDeniedException",
                   "OptInRequired", "UnrecognizedClientException"})
_NOT_FOUND = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})
_RESOURCE_NOT_FOUND = frozenset({"InvalidGroup.NotFound", "InvalidGroupId.NotFound", "InvalidKeyPair.NotFound",
                                 "InvalidPlacementGroup.Unknown"})
_IN_USE = frozenset({"DependencyViolation", "InvalidPlacementGroup.InUse"})
_UNAVAILABLE = frozenset({"InternalError", "InternalFailure", "Unavailable", "ServiceUnavailable",
                          "ServerInternal", "RequestTimeout", "RequestExpired"})


def translate_error(exc: BaseException) -> ProviderError:
    """The ONE place botocore errors become orch's taxonomy. Codes first; HTTP status only as fallback.

    (EC2 sends InsufficientInstanceCapacity with HTTP 500, so the status alone would call it transient.)
    """
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return AuthError(f"no usable AWS credentials: {exc}", provider=PROVIDER, hint=AUTH_HINT)
    if isinstance(exc, NoRegionError):
        return InvalidRequestError(f"no AWS region: {exc}", provider=PROVIDER)
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
        return ProviderUnavailableError(f"cannot reach AWS: {exc}", provider=PROVIDER)
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        message = str(err.get("Message", "")) or str(exc)
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code == "SpotMaxPriceTooLow":
            return PriceTooLowError(message, provider=PROVIDER, code=code)
        if code in _CAPACITY:
            return InsufficientCapacityError(message, provider=PROVIDER, code=code)
        if code in _QUOTA:
            return QuotaExceededError(message, provider=PROVIDER, code=code)
        if code in _THROTTLE:
            return RateLimitedError(message, provider=PROVIDER, code=code)
        if code in _AUTH:
            return AuthError(message, provider=PROVIDER, code=code, hint=AUTH_HINT)
        if code in _NOT_FOUND:
            return InstanceNotFoundError(message, provider=PROVIDER, code=code)
        if code in _RESOURCE_NOT_FOUND:
            return ResourceNotFoundError(message, provider=PROVIDER, code=code)
        if code in _IN_USE:
            return ResourceInUseError(message, provider=PROVIDER, code=code)
        if code in _UNAVAILABLE or status >= 500:
            return ProviderUnavailableError(message, provider=PROVIDER, code=code or str(status))
        if status == 429:
            return RateLimitedError(message, provider=PROVIDER, code=code)
        if code.startswith(("InvalidParameter", "Invalid", "MissingParameter", "Unsupported")) or 400 <= status < 500:
            return InvalidRequestError(message, provider=PROVIDER, code=code)
        return ProviderUnavailableError(message, provider=PROVIDER, code=code or None)
    if isinstance(exc, BotoCoreError):
        return ProviderUnavailableError(f"AWS client error: {exc}", provider=PROVIDER)
    return ProviderUnavailableError(f"unexpected error talking to AWS: {exc!r}", provider=PROVIDER)


def encode_id(region: str, ec2_id: str) -> str:
    return f"{region}/{ec2_id}"


def decode_id(instance_id: str) -> tuple[str, str] | None:
    """(region, ec2 id), or None when the id is not one this adapter made."""
    region, sep, ec2_id = instance_id.partition("/")
    if not sep or not region or not ec2_id.startswith("i-"):
        return None
    return region, ec2_id


def map_state(raw_state: str, reason_code: str | None) -> InstanceState:
    """EC2 state name (+ StateReason.Code) -> orch's state. A spot reclaim reads PREEMPTED in any end state."""
    if reason_code in SPOT_REASON_CODES and raw_state in ("shutting-down", "terminated", "stopping", "stopped"):
        return InstanceState.PREEMPTED
    try:
        return _STATES[raw_state]
    except KeyError:
        raise ProviderUnavailableError(f"unknown EC2 instance state {raw_state!r}", provider=PROVIDER) from None


def to_instance(region: str, raw: dict[str, Any], ssh_user: str = "ubuntu") -> Instance:
    """One describe_instances item -> Instance."""
    tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
    raw_state = raw.get("State", {}).get("Name", "")
    reason = raw.get("StateReason") or {}
    code = reason.get("Code") or None
    launched = raw.get("LaunchTime")
    return Instance(
        provider=PROVIDER,
        instance_id=encode_id(region, raw["InstanceId"]),
        launch_id=tags.get(TAG_LAUNCH_ID),
        owner=tags.get(TAG_OWNER),
        job=tags.get(TAG_JOB),
        state=map_state(raw_state, code),
        instance_type=raw.get("InstanceType", ""),
        region=region,
        zone=(raw.get("Placement") or {}).get("AvailabilityZone"),
        market=Market.SPOT if raw.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND,
        raw_state=raw_state,
        raw_reason=code or raw.get("StateTransitionReason") or None,
        public_ip=raw.get("PublicIpAddress"),
        private_ip=raw.get("PrivateIpAddress"),
        ssh_user=ssh_user,
        created_at=launched if isinstance(launched, datetime) else None,
        extra=(("ec2_instance_id", raw["InstanceId"]),),
        fabric=efa.launched_fabric(tags, raw.get("NetworkInterfaces", [])),
    )


def merge_spot_prices(catalog: Iterable[Offer], history: Iterable[dict[str, Any]]) -> list[Offer]:
    """Replace catalog spot offers with live per-AZ ones where the spot price history has them.

    ``catalog`` and ``history`` are for ONE region (the history comes from that region's endpoint).
    ``history`` items are describe_spot_price_history entries; the latest per (type, AZ) wins. A catalog
    spot offer with live prices for its (type, region) becomes one live offer per AZ; everything else
    (on-demand rows, types without live prices) passes through unchanged.
    """
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for h in history:
        if not str(h.get("ProductDescription", "")).startswith("Linux/UNIX"):
            continue
        key = (h["InstanceType"], h.get("AvailabilityZoneId") or h["AvailabilityZone"])
        if key not in latest or h["Timestamp"] > latest[key]["Timestamp"]:
            latest[key] = h
    out: list[Offer] = []
    replaced: set[tuple[str, str]] = set()
    for offer in catalog:
        live = [h for (itype, _), h in sorted(latest.items()) if itype == offer.instance_type]
        if offer.market is not Market.SPOT or not live:
            out.append(offer)
            continue
        if (offer.instance_type, offer.region) in replaced:
            continue
        replaced.add((offer.instance_type, offer.region))
        for h in live:
            ts = h["Timestamp"]
            out.append(_replace_price(offer, zone=h.get("AvailabilityZoneId") or h["AvailabilityZone"],
                                      price=float(h["SpotPrice"]),
                                      as_of=ts.date() if isinstance(ts, datetime) else date.today()))
    return out


def _replace_price(o: Offer, *, zone: str, price: float, as_of: date) -> Offer:
    return Offer(
        provider=o.provider, instance_type=o.instance_type, region=o.region, zone=zone, gpu=o.gpu,
        gpu_count=o.gpu_count, vram_gb=o.vram_gb, vcpus=o.vcpus, memory_gb=o.memory_gb,
        interconnect=o.interconnect, market=o.market, price_hr=price, price_as_of=as_of,
        price_as_of_approximate=False, source="live", availability=o.availability, offer_id=o.offer_id,
    )


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
        self._amis: dict[str, str] = {}
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
        """Catalog offers in the configured regions, GPU counts confirmed and spot prices made live.

        Live data is best effort: a region whose API fails keeps its catalog rows (a quote should not
        fail because one region throttles), but auth errors are raised.
        """
        if req.providers and PROVIDER not in req.providers:
            return []
        regions = set(self.settings.regions)
        # Spot prices are replaced per AZ below, so match on markets/region first, price after merging.
        loose = GpuRequest(gpus=req.gpus, count=req.count, nodes=req.nodes, markets=req.markets,
                           providers=(PROVIDER,), regions=req.regions, min_vram_gb=req.min_vram_gb,
                           interconnect=req.interconnect)
        base = [o for o in match_offers(load_catalog().offers, loose) if o.region in regions]
        base = list(dict.fromkeys(base))  # the shipped catalog repeats some rows
        merged: list[Offer] = []
        for region in sorted({o.region for o in base}):
            rows = [o for o in base if o.region == region]
            types = sorted({o.instance_type for o in rows})
            try:
                gpu_counts = self._gpu_counts(region, types)
                rows = [o for o in rows if gpu_counts.get(o.instance_type, o.gpu_count) == o.gpu_count]
                if Market.SPOT in req.markets:
                    rows = merge_spot_prices(rows, self._spot_history(region, types))
            except AuthError:
                raise
            except ProviderError as exc:
                log.warning("aws %s: live offer data unavailable, using the catalog: %s", region, exc)
            merged.extend(rows)
        return match_offers(merged, req)

    def _gpu_counts(self, region: str, types: list[str]) -> dict[str, int]:
        ec2 = self._client("ec2", region)
        try:
            found = self._call(lambda: ec2.describe_instance_types(InstanceTypes=types)["InstanceTypes"])
        except InvalidRequestError:  # a type this region does not have: skip confirmation, keep the catalog
            return {}
        return {t["InstanceType"]: sum(g.get("Count", 0) for g in t["GpuInfo"]["Gpus"])
                for t in found if t.get("GpuInfo")}

    def _spot_history(self, region: str, types: list[str]) -> list[dict[str, Any]]:
        ec2 = self._client("ec2", region)
        start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)

        def fetch() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for page in ec2.get_paginator("describe_spot_price_history").paginate(
                    InstanceTypes=types, ProductDescriptions=["Linux/UNIX"], StartTime=start):
                out.extend(page.get("SpotPriceHistory", []))
            return out
        return self._call(fetch)

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
        return self._with_spot_price(instance) if instance.market is Market.SPOT else instance

    def _with_spot_price(self, instance: Instance) -> Instance:
        """A spot instance priced at its zone's current spot price (what AWS bills it), from
        DescribeSpotPriceHistory; without an answer the instance carries no price (the offer's is charged)."""
        try:
            history = self._spot_history(instance.region, [instance.instance_type])
        except ProviderError as exc:
            log.warning("aws %s: no spot price for %s at launch: %s", instance.region, instance.instance_id, exc)
            return instance
        mine = [h for h in history if instance.zone in (h.get("AvailabilityZone"), h.get("AvailabilityZoneId"))]
        if not mine:
            return instance
        latest = max(mine, key=lambda h: h["Timestamp"])
        return replace(instance, price_hr=float(latest["SpotPrice"]))

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
        tags = [{"Key": TAG_LAUNCH_ID, "Value": spec.launch_id}, {"Key": TAG_OWNER, "Value": spec.owner},
                {"Key": TAG_JOB, "Value": spec.job}, {"Key": "Name", "Value": spec.name}]
        if spec.gang:   # how garbage collection knows the gang's placement group is still held
            tags.append({"Key": placement.TAG_GANG, "Value": spec.gang})
        efa_count = efa.efa_interface_count(spec.offer.instance_type, gang=spec.gang)
        if efa_count:
            tags.append({"Key": efa.TAG_FABRIC, "Value": "efa"})
        params: dict[str, Any] = {
            # The machine image, never the job's container (spec.image runs inside it: docker on this AMI).
            "ImageId": self._ami(region),
            "InstanceType": spec.offer.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": spec.launch_id,
            "UserData": user_data(spec.startup_script),
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags},
                                  {"ResourceType": "volume", "Tags": tags}],
            "BlockDeviceMappings": [{"DeviceName": self.settings.root_device_name,
                                     "Ebs": {"VolumeSize": spec.disk_gb, "DeleteOnTermination": True}}],
        }
        key_name = self.settings.key_name or self._import_key(region, spec, tags)
        if key_name:
            params["KeyName"] = key_name
        groups = self._security_groups(ec2, spec.owner)
        if groups:
            params["SecurityGroupIds"] = groups
        if self.settings.instance_profile:
            profile = self.settings.instance_profile
            params["IamInstanceProfile"] = {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}
        if self.settings.subnet_id:
            params["SubnetId"] = self.settings.subnet_id
        elif spec.offer.zone:
            params["Placement"] = {"AvailabilityZone": self._zone_name(region, spec.offer.zone)}
        if spec.gang:   # a multi-node gang: its nodes in one cluster placement group, tagged to find it again
            params["Placement"] = {**params.get("Placement", {}), "GroupName": placement.ensure_group(
                ec2, owner=spec.owner, gang=spec.gang, launch_id=spec.launch_id)}
        if efa_count:   # the interfaces carry the groups and subnet (EC2 refuses them on both levels)
            params["NetworkInterfaces"] = efa.efa_interfaces(
                efa_count, groups=params.pop("SecurityGroupIds", []), subnet_id=params.pop("SubnetId", None))
        if spec.offer.market is Market.SPOT:
            spot: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
            if spec.max_price_hr is not None:
                spot["MaxPrice"] = f"{spec.max_price_hr:.4f}"
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
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

    def _ami(self, region: str) -> str:
        if self.settings.ami:
            return self.settings.ami
        if region in self._amis:
            return self._amis[region]
        ec2 = self._client("ec2", region)
        images = ec2.describe_images(Owners=list(self.settings.ami_owners), Filters=[
            {"Name": "name", "Values": [self.settings.ami_name_pattern]},
            {"Name": "state", "Values": ["available"]},
            {"Name": "architecture", "Values": ["x86_64"]},
        ])["Images"]
        if not images:
            raise InvalidRequestError(
                f"no AMI in {region} matches {self.settings.ami_name_pattern!r} (owners {self.settings.ami_owners});"
                " set aws.ami", provider=PROVIDER)
        newest = max(images, key=lambda i: (i.get("CreationDate", ""), i["ImageId"]))
        self._amis[region] = newest["ImageId"]
        return newest["ImageId"]

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
