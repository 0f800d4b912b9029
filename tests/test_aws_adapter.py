"""AWS adapter unit tests: error translation, state mapping, and behaviour against moto (tests/fakes/aws.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from providers.aws.adapter import AwsProvider
from providers.aws.errors import translate_error
from providers.aws.instances import decode_id, map_state, to_instance
from providers.aws.settings import Settings
from providers.aws.spot_prices import merge_spot_prices
from providers.base import (
    TAG_JOB,
    TAG_LAUNCH_ID,
    TAG_OWNER,
    GpuRequest,
    InstanceState,
    LaunchSpec,
    Market,
    OfferOrigin,
    ResourceKind,
    new_launch_id,
)
from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    PriceTooLowError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
    ResourceInUseError,
    ResourceNotFoundError,
)
from tests.contract.harness_aws import INSTANCE_TYPE, REGION, catalog_offer
from tests.fakes.aws import FAKE_ENV, FakeAws, SpotPrice

OWNER = "unit"


def _client_error(code: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"m {code}"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "RunInstances")


@pytest.mark.parametrize(("code", "status", "expected"), [
    ("InsufficientInstanceCapacity", 500, InsufficientCapacityError),
    ("InsufficientCapacity", 500, InsufficientCapacityError),
    ("MaxSpotInstanceCountExceeded", 400, InsufficientCapacityError),
    ("SpotMaxPriceTooLow", 400, PriceTooLowError),
    ("VcpuLimitExceeded", 400, QuotaExceededError),
    ("InstanceLimitExceeded", 400, QuotaExceededError),
    ("RequestLimitExceeded", 503, RateLimitedError),
    ("Throttling", 400, RateLimitedError),
    ("UnauthorizedOperation", 403, AuthError),
    ("AuthFailure", 401, AuthError),
    ("InvalidClientTokenId", 403, AuthError),
    ("InvalidInstanceID.NotFound", 400, InstanceNotFoundError),
    ("InvalidParameterValue", 400, InvalidRequestError),
    ("InvalidParameterCombination", 400, InvalidRequestError),
    ("InternalError", 500, ProviderUnavailableError),
    ("Unavailable", 503, ProviderUnavailableError),
    ("SomethingNew", 502, ProviderUnavailableError),
    ("DependencyViolation", 400, ResourceInUseError),
    ("InvalidGroup.NotFound", 400, ResourceNotFoundError),
    ("InvalidKeyPair.NotFound", 400, ResourceNotFoundError),
])
def test_translate_error_codes(code: str, status: int, expected: type) -> None:
    err = translate_error(_client_error(code, status))
    assert type(err) is expected
    assert err.provider == "aws" and err.code == code


def test_a_type_not_offered_in_the_zone_is_no_capacity_there_other_unsupported_is_invalid() -> None:
    """EC2's Unsupported for an instance type its zone does not offer: the offer cannot be had there (capacity, so
    the engine records a capacity failure and tries the next offer); any other Unsupported is an invalid request."""
    def unsupported(message: str) -> ClientError:
        return ClientError({"Error": {"Code": "Unsupported", "Message": message},
                            "ResponseMetadata": {"HTTPStatusCode": 400}}, "RunInstances")

    zone = translate_error(unsupported(
        "Your requested instance type (p4d.24xlarge) is not supported in your requested Availability Zone "
        "(us-east-1e). Please retry your request by not specifying an Availability Zone or choosing us-east-1a, "
        "us-east-1b, us-east-1c."))
    assert type(zone) is InsufficientCapacityError and zone.code == "Unsupported"
    other = translate_error(unsupported("The requested configuration is currently not supported."))
    assert type(other) is InvalidRequestError


def test_translate_error_sdk_exceptions() -> None:
    auth = translate_error(NoCredentialsError())
    assert isinstance(auth, AuthError) and auth.hint and "aws configure" in auth.hint
    assert isinstance(translate_error(EndpointConnectionError(endpoint_url="http://x")), ProviderUnavailableError)
    assert RateLimitedError.retryable and not isinstance(translate_error(_client_error("VcpuLimitExceeded")),
                                                         RateLimitedError)


@pytest.mark.parametrize(("raw", "reason", "expected"), [
    ("pending", None, InstanceState.PENDING),
    ("running", None, InstanceState.RUNNING),
    ("stopping", None, InstanceState.STOPPING),
    ("shutting-down", "Client.UserInitiatedShutdown", InstanceState.STOPPING),
    ("stopped", "Client.UserInitiatedShutdown", InstanceState.STOPPED),
    ("terminated", "Client.UserInitiatedShutdown", InstanceState.TERMINATED),
    ("terminated", "Server.SpotInstanceTermination", InstanceState.PREEMPTED),
    ("shutting-down", "Server.SpotInstanceTermination", InstanceState.PREEMPTED),
    ("stopped", "Server.SpotInstanceShutdown", InstanceState.PREEMPTED),
    ("running", "Server.SpotInstanceTermination", InstanceState.RUNNING),
])
def test_state_mapping(raw: str, reason: str | None, expected: InstanceState) -> None:
    assert map_state(raw, reason) is expected


def test_instance_ids_carry_the_region() -> None:
    assert decode_id("eu-west-1/i-0abc") == ("eu-west-1", "i-0abc")
    assert decode_id("i-0abc") is None and decode_id("does-not-exist") is None


def test_settings_import_no_sdk() -> None:
    code = "import sys, providers.aws.settings as s; s.Settings(); print('boto3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "False"


def test_settings_region_default_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-2")
    assert Settings().regions == ["eu-west-2"]


# -- against moto -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAws]:
    f = FakeAws()
    yield f
    f.close()


def _session() -> boto3.Session:
    return boto3.Session(aws_access_key_id=FAKE_ENV["AWS_ACCESS_KEY_ID"],
                         aws_secret_access_key=FAKE_ENV["AWS_SECRET_ACCESS_KEY"], region_name=REGION)


def _settings(fake: FakeAws, **kw: object) -> Settings:
    base: dict[str, object] = dict(regions=[REGION], endpoint_url=fake.endpoint_url, ami_owners=["099720109477"],
                                   ami_name_pattern="ubuntu/images/hvm-ssd/ubuntu-*-amd64-server-*",
                                   retry_attempts=4, retry_initial_wait_s=0.001, retry_max_wait_s=0.01,
                                   retry_deadline_s=600.0)
    base.update(kw)
    return Settings.model_validate(base)


@pytest.fixture
def aws(fake: FakeAws) -> Iterator[AwsProvider]:
    fake.reset()
    p = AwsProvider(_settings(fake), session=_session())
    yield p
    p.close()
    fake.reset()


def _ec2(fake: FakeAws):  # type: ignore[no-untyped-def]
    return _session().client("ec2", endpoint_url=fake.endpoint_url, region_name=REGION)


def _spec(market: Market = Market.ON_DEMAND, **kw: object) -> LaunchSpec:
    return LaunchSpec(launch_id=new_launch_id(), owner=OWNER, job="j1", offer=catalog_offer(market),
                      startup_script="#!/bin/sh\necho hi\n", **kw)  # type: ignore[arg-type]


def test_moto_ignores_client_token_so_launch_dedupes_by_tag(aws: AwsProvider, fake: FakeAws) -> None:
    ec2 = _ec2(fake)
    image = ec2.describe_images(Owners=["099720109477"])["Images"][0]["ImageId"]
    twice = [ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, ClientToken="same")["Instances"][0]
             for _ in range(2)]
    assert twice[0]["InstanceId"] != twice[1]["InstanceId"], "moto started honouring ClientToken: revisit"

    spec = _spec()
    # An earlier attempt landed (say, before a timeout) under another token: launch must adopt it.
    earlier = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType=INSTANCE_TYPE,
                                ClientToken="another-token", TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                    {"Key": TAG_LAUNCH_ID, "Value": spec.launch_id},
                                    {"Key": TAG_OWNER, "Value": OWNER}]}])["Instances"][0]
    before = fake.requests["RunInstances"]
    first = aws.launch(spec)
    second = aws.launch(spec)
    assert first.instance_id == second.instance_id == f"{REGION}/{earlier['InstanceId']}"
    assert fake.requests["RunInstances"] == before
    assert len([i for i in aws.list_instances(OWNER) if i.launch_id == spec.launch_id]) == 1


def test_throttled_launch_is_retried_to_one_instance(aws: AwsProvider, fake: FakeAws) -> None:
    fake.fail("RunInstances", "throttle", times=2)
    inst = aws.launch(_spec())
    assert fake.requests["RunInstances"] == 3
    assert [i.instance_id for i in aws.list_instances(OWNER)] == [inst.instance_id]


def test_capacity_is_not_retried(aws: AwsProvider, fake: FakeAws) -> None:
    fake.fail("RunInstances", "capacity", times=5)
    with pytest.raises(InsufficientCapacityError):
        aws.launch(_spec())
    assert fake.requests["RunInstances"] == 1


def test_spot_launch_sends_max_price_tags_and_user_data(aws: AwsProvider, fake: FakeAws) -> None:
    spec = _spec(Market.SPOT, max_price_hr=4.25)
    inst = aws.launch(spec)
    sent = fake.sent["RunInstances"]
    assert sent["InstanceMarketOptions.MarketType"] == "spot"
    assert sent["InstanceMarketOptions.SpotOptions.MaxPrice"] == "4.2500"
    assert sent["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"] == "terminate"
    assert sent["ClientToken"] == spec.launch_id

    raw = _ec2(fake).describe_instances(InstanceIds=[inst.instance_id.split("/")[1]])
    described = raw["Reservations"][0]["Instances"][0]
    tags = {t["Key"]: t["Value"] for t in described["Tags"]}
    assert tags == {TAG_LAUNCH_ID: spec.launch_id, TAG_OWNER: OWNER, TAG_JOB: "j1", "Name": spec.name}
    assert described["InstanceLifecycle"] == "spot" and inst.market is Market.SPOT
    assert described["Placement"]["AvailabilityZone"] == "us-east-1b"  # catalog zone id use1-az1 resolved
    attr = _ec2(fake).describe_instance_attribute(InstanceId=described["InstanceId"], Attribute="userData")
    import base64
    import gzip
    # gzip'd (cloud-init decompresses it), so orch's boot script fits EC2's 16 KB.
    assert gzip.decompress(base64.b64decode(attr["UserData"]["Value"])).decode() == spec.startup_script


def test_on_demand_sends_no_market_options(aws: AwsProvider, fake: FakeAws) -> None:
    inst = aws.launch(_spec())
    assert not any(k.startswith("InstanceMarketOptions") for k in fake.sent["RunInstances"])
    assert inst.market is Market.ON_DEMAND and inst.state is InstanceState.PENDING


def test_ssh_key_imported_once_per_launch_id(aws: AwsProvider, fake: FakeAws) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    pub = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    spec = _spec(ssh_public_key=pub)
    aws.launch(spec)
    fake.fail("DescribeInstances", "server-error", times=1)  # first dedupe fails, launch retries whole
    aws.launch(spec)
    names = [k["KeyName"] for k in _ec2(fake).describe_key_pairs()["KeyPairs"]]
    assert names.count(f"orch-{spec.launch_id}") == 1
    assert fake.sent["RunInstances"]["KeyName"] == f"orch-{spec.launch_id}"


def test_configured_key_name_wins(fake: FakeAws) -> None:
    fake.reset()
    p = AwsProvider(_settings(fake, key_name="team-key"), session=_session())
    p.launch(_spec(ssh_public_key="ssh-ed25519 AAAA unused"))
    assert fake.sent["RunInstances"]["KeyName"] == "team-key"
    assert "ImportKeyPair" not in fake.requests


def test_get_terminate_stop_and_missing(aws: AwsProvider, fake: FakeAws) -> None:
    inst = aws.launch(_spec())
    aws.stop(inst.instance_id)
    got = aws.get(inst.instance_id)
    assert got is not None and got.state is InstanceState.STOPPED
    aws.terminate(inst.instance_id)
    got = aws.get(inst.instance_id)
    assert got is not None and got.state is InstanceState.TERMINATED
    assert aws.get(f"{REGION}/i-0123456789abcdef0") is None
    assert aws.get("not-an-aws-id") is None
    aws.terminate(f"{REGION}/i-0123456789abcdef0")
    with pytest.raises(InstanceNotFoundError):
        aws.stop("not-an-aws-id")


def test_preempted_spot_keeps_reason(aws: AwsProvider, fake: FakeAws) -> None:
    inst = aws.launch(_spec(Market.SPOT))
    fake.interrupt(inst.instance_id.split("/")[1], REGION)
    got = aws.get(inst.instance_id)
    assert got is not None and got.state is InstanceState.PREEMPTED
    assert got.raw_reason == "Server.SpotInstanceTermination" and got.raw_state == "terminated"


def test_launch_outside_configured_regions_is_refused(aws: AwsProvider) -> None:
    spec = LaunchSpec(launch_id=new_launch_id(), owner=OWNER, job="j",
                      offer=catalog_offer(Market.ON_DEMAND, "g5.12xlarge", "eu-north-1"))
    with pytest.raises(InvalidRequestError):
        aws.launch(spec)


def test_no_matching_ami_is_an_invalid_request(fake: FakeAws) -> None:
    fake.reset()
    p = AwsProvider(_settings(fake, ami_name_pattern="no-such-image-*"), session=_session())
    with pytest.raises(InvalidRequestError, match=r"aws\.ami"):
        p.launch(_spec())


def test_check_credentials(aws: AwsProvider, fake: FakeAws, monkeypatch: pytest.MonkeyPatch,
                           tmp_path: Path) -> None:
    aws.check_credentials()
    fake.fail("GetCallerIdentity", "auth")
    with pytest.raises(AuthError):
        aws.check_credentials()
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    bare = AwsProvider(_settings(fake))
    with pytest.raises(AuthError) as info:
        bare.check_credentials()
    assert info.value.hint and "AWS_PROFILE" in info.value.hint


def test_live_spot_prices_merge_onto_catalog(aws: AwsProvider, fake: FakeAws) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    fake.plant_spot_prices([
        SpotPrice(INSTANCE_TYPE, "us-east-1a", "use1-az6", 9.0, now - timedelta(hours=2)),  # superseded
        SpotPrice(INSTANCE_TYPE, "us-east-1a", "use1-az6", 5.5, now),
        SpotPrice(INSTANCE_TYPE, "us-east-1c", "use1-az2", 4.75, now),
        SpotPrice(INSTANCE_TYPE, "eu-west-1a", "euw1-az1", 0.5, now),  # another region: never served here
    ])
    offers = aws.offers(GpuRequest(gpus=("A10G-24G",), count=8))
    spot = sorted((o.zone, o.price_hr, o.source) for o in offers if o.market is Market.SPOT)
    assert spot == [("use1-az2", 4.75, "live"), ("use1-az6", 5.5, "live")]
    on_demand = [o for o in offers if o.market is Market.ON_DEMAND]
    assert on_demand == [catalog_offer(Market.ON_DEMAND)]
    assert fake.requests["DescribeInstanceTypes"] == 1

    capped = aws.offers(GpuRequest(gpus=("A10G-24G",), count=8, markets=frozenset({Market.SPOT}), max_price_hr=5.0))
    assert [(o.zone, o.price_hr) for o in capped] == [("use1-az2", 4.75)]


def test_offers_fall_back_to_catalog_when_live_fails(aws: AwsProvider, fake: FakeAws) -> None:
    fake.fail("DescribeSpotPriceHistory", "throttle", times=100)
    offers = aws.offers(GpuRequest(gpus=("A10G-24G",), count=8, markets=frozenset({Market.SPOT})))
    assert offers == [catalog_offer(Market.SPOT)]


def test_offers_drop_rows_whose_gpu_count_the_api_contradicts(aws: AwsProvider, fake: FakeAws,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    import providers.aws.offers as aws_offers
    from providers.catalog import load_catalog

    real = catalog_offer(Market.ON_DEMAND)
    # A stale catalog row claiming g5.48xlarge has 2 GPUs: describe_instance_types says 8, so it is dropped.
    wrong = replace(real, gpu_count=2, price_hr=1.0)
    snap = load_catalog()
    monkeypatch.setattr(aws_offers, "load_catalog", lambda: replace(snap, offers=(*snap.offers, wrong)))
    assert aws.offers(GpuRequest(gpus=("A10G-24G",), count=2, markets=frozenset({Market.ON_DEMAND}))) == []
    assert aws.offers(GpuRequest(gpus=("A10G-24G",), count=8, markets=frozenset({Market.ON_DEMAND}))) == [real]


def test_merge_spot_prices_latest_linux_price_per_zone() -> None:
    spot = catalog_offer(Market.SPOT)
    on_demand = catalog_offer(Market.ON_DEMAND)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    history = [
        {"InstanceType": INSTANCE_TYPE, "AvailabilityZone": "us-east-1a", "AvailabilityZoneId": "use1-az6",
         "ProductDescription": "Linux/UNIX", "SpotPrice": "3.0", "Timestamp": t0},
        {"InstanceType": INSTANCE_TYPE, "AvailabilityZone": "us-east-1a", "AvailabilityZoneId": "use1-az6",
         "ProductDescription": "Linux/UNIX", "SpotPrice": "3.5", "Timestamp": t0 + timedelta(hours=1)},
        {"InstanceType": INSTANCE_TYPE, "AvailabilityZone": "us-east-1b", "AvailabilityZoneId": "use1-az1",
         "ProductDescription": "Windows", "SpotPrice": "0.1", "Timestamp": t0},
        {"InstanceType": "other.type", "AvailabilityZone": "us-east-1b", "ProductDescription": "Linux/UNIX",
         "SpotPrice": "0.2", "Timestamp": t0},
    ]
    merged = merge_spot_prices([spot, on_demand, spot], history)
    assert on_demand in merged
    live = [o for o in merged if o.source is OfferOrigin.LIVE]
    assert [(o.zone, o.price_hr, o.price_as_of.isoformat()) for o in live] == [("use1-az6", 3.5, "2026-01-01")]
    assert merge_spot_prices([spot], []) == [spot]


# -- the network orch opens for SSH, the node's identity, and what is left behind ------------------------------
def _group(fake: FakeAws, name: str = f"orch-{OWNER}") -> dict[str, object] | None:
    found = _ec2(fake).describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]}])["SecurityGroups"]
    return found[0] if found else None


def _ssh_cidrs(group: dict[str, object]) -> set[str]:
    perms = group["IpPermissions"]
    assert isinstance(perms, list)
    return {r["CidrIp"] for p in perms if p.get("FromPort") == 22 for r in p["IpRanges"]}


def _open_ranges(group: dict[str, object]) -> set[str]:
    """Every address range the group admits on any port (group-sourced rules are not ranges)."""
    perms = group["IpPermissions"]
    assert isinstance(perms, list)
    return ({r["CidrIp"] for p in perms for r in p.get("IpRanges", [])}
            | {r["CidrIpv6"] for p in perms for r in p.get("Ipv6Ranges", [])})


def test_default_launch_opens_no_port_to_anyone_and_lets_the_group_talk(fake: FakeAws) -> None:
    """No ``ssh_ingress_cidrs`` given: orch's group admits no address range at all (0.0.0.0/0 least of all),
    only its own members, on every protocol and port (a gang's rendezvous and NCCL)."""
    fake.reset()
    settings = _settings(fake)
    assert settings.ssh_ingress_cidrs == []
    p = AwsProvider(settings, session=_session())
    a, b = p.launch(_spec()), p.launch(_spec())
    group = _group(fake)
    assert group is not None
    assert _open_ranges(group) == set(), "nothing from outside the group"
    [self_rule] = group["IpPermissions"]  # type: ignore[misc]
    assert self_rule["IpProtocol"] == "-1"
    assert [pair["GroupId"] for pair in self_rule["UserIdGroupPairs"]] == [group["GroupId"]]
    held = _ec2(fake).describe_instances(InstanceIds=[i.instance_id.split("/")[1] for i in (a, b)])
    for inst in held["Reservations"][0]["Instances"] + held["Reservations"][-1]["Instances"]:
        assert [g["GroupId"] for g in inst["SecurityGroups"]] == [group["GroupId"]]
    p.launch(_spec())
    assert fake.requests["AuthorizeSecurityGroupIngress"] == 1, "the self rule is found, not added again"


def test_launch_opens_ssh_in_an_owned_group_that_is_deleted_once_unused(fake: FakeAws) -> None:
    fake.reset()
    p = AwsProvider(_settings(fake, ssh_ingress_cidrs=["203.0.113.7/32"]), session=_session())
    a, b = p.launch(_spec()), p.launch(_spec())
    group = _group(fake)
    assert group is not None, "launch created orch's SSH group"
    default_vpc = _ec2(fake).describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]
    assert group["VpcId"] == default_vpc["VpcId"]
    assert {"Key": TAG_OWNER, "Value": OWNER} in group["Tags"]  # type: ignore[operator]
    assert _ssh_cidrs(group) == {"203.0.113.7/32"}
    assert fake.requests["CreateSecurityGroup"] == 1, "one group per VPC and owner, found again on the 2nd launch"
    described = _ec2(fake).describe_instances(InstanceIds=[a.instance_id.split("/")[1]])
    assert [g["GroupId"] for g in described["Reservations"][0]["Instances"][0]["SecurityGroups"]] == [group["GroupId"]]

    [listed] = [r for r in p.list_network_resources(OWNER) if r.kind is ResourceKind.SECURITY_GROUP]
    assert listed.resource_id == f"{REGION}/{group['GroupId']}" and listed.owner == OWNER and listed.in_use
    assert p.list_network_resources("someone-else") == []
    p.terminate(a.instance_id)
    assert all(r.in_use for r in p.list_network_resources(OWNER)), "b still holds the group"
    p.terminate(b.instance_id)
    [unused] = p.list_network_resources(OWNER)
    assert not unused.in_use
    p.delete_network_resource(unused)
    assert _group(fake) is None
    p.delete_network_resource(unused)                        # missing == success
    assert p.list_network_resources(OWNER) == []
    p.launch(_spec())                                        # and the next launch makes it again
    assert _group(fake) is not None


def test_ssh_rules_follow_the_setting(fake: FakeAws) -> None:
    fake.reset()
    AwsProvider(_settings(fake, ssh_ingress_cidrs=["198.51.100.0/24", "2001:db8::/32"]),
                session=_session()).launch(_spec())
    group = _group(fake)
    assert group is not None and _ssh_cidrs(group) == {"198.51.100.0/24"}
    assert {r["CidrIpv6"] for perm in group["IpPermissions"] for r in perm["Ipv6Ranges"]} == {"2001:db8::/32"}
    AwsProvider(_settings(fake, ssh_ingress_cidrs=["203.0.113.0/24"]), session=_session()).launch(_spec())
    group = _group(fake)
    assert group is not None and _ssh_cidrs(group) == {"203.0.113.0/24"}
    assert not [r for perm in group["IpPermissions"] for r in perm["Ipv6Ranges"]]


def test_configured_groups_create_no_group(fake: FakeAws) -> None:
    fake.reset()
    mine = _ec2(fake).create_security_group(GroupName="team", Description="d")["GroupId"]
    AwsProvider(_settings(fake, security_group_ids=[mine]), session=_session()).launch(_spec())
    assert fake.sent["RunInstances"]["SecurityGroupId.1"] == mine
    assert fake.requests["CreateSecurityGroup"] == 1, "only the test's own \"team\" group"
    AwsProvider(_settings(fake, ssh_ingress_cidrs=[]), session=_session()).launch(_spec())
    group = _group(fake)
    assert group is not None and _open_ranges(group) == set(), "no ingress: orch's group, closed to outsiders"


def test_launch_heals_a_group_deleted_under_it(aws: AwsProvider, fake: FakeAws) -> None:
    """GC may delete the unused group between ensure and RunInstances: launch ensures it again, once."""
    fake.fail("RunInstances", "InvalidGroup.NotFound", times=1)
    inst = aws.launch(_spec())
    assert fake.requests["RunInstances"] == 2 and inst.launch_id


def test_bad_ssh_ingress_is_a_settings_error(fake: FakeAws) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="not a CIDR"):
        _settings(fake, ssh_ingress_cidrs=["203.0.113.7/33"])
    assert _settings(fake, ssh_ingress_cidrs=["10.1.2.3/8", "10.0.0.0/8"]).ssh_ingress_cidrs == ["10.0.0.0/8"]


@pytest.mark.parametrize("profile", ["orch-node", "arn:aws:iam::123456789012:instance-profile/orch-node"])
def test_instance_profile_gives_the_node_a_role(fake: FakeAws, profile: str) -> None:
    fake.reset()
    iam = _session().client("iam", endpoint_url=fake.endpoint_url, region_name=REGION)
    iam.create_instance_profile(InstanceProfileName="orch-node")
    p = AwsProvider(_settings(fake, instance_profile=profile), session=_session())
    inst = p.launch(_spec())
    key = "IamInstanceProfile.Arn" if profile.startswith("arn:") else "IamInstanceProfile.Name"
    assert fake.sent["RunInstances"][key] == profile
    described = _ec2(fake).describe_instances(InstanceIds=[inst.instance_id.split("/")[1]])
    assert described["Reservations"][0]["Instances"][0]["IamInstanceProfile"]["Arn"].endswith(
        "instance-profile/orch-node")


def test_no_instance_profile_sends_none(aws: AwsProvider, fake: FakeAws) -> None:
    aws.launch(_spec())
    assert not any(k.startswith("IamInstanceProfile") for k in fake.sent["RunInstances"])


def test_imported_key_pair_is_a_leftover_once_its_instance_is_gone(aws: AwsProvider, fake: FakeAws) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    pub = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    spec = _spec(ssh_public_key=pub)
    inst = aws.launch(spec)
    [key] = [r for r in aws.list_network_resources(OWNER) if r.kind is ResourceKind.KEY_PAIR]
    assert key.name == f"orch-{spec.launch_id}" and key.launch_id == spec.launch_id and key.in_use
    assert key.created_at is not None
    aws.terminate(inst.instance_id)
    [key] = [r for r in aws.list_network_resources(OWNER) if r.kind is ResourceKind.KEY_PAIR]
    assert not key.in_use
    aws.delete_network_resource(key)
    aws.delete_network_resource(key)
    assert not _ec2(fake).describe_key_pairs()["KeyPairs"]


# -- published example payloads (tests/fixtures/aws/PROVENANCE.md) ---------------------------------------------
FIXTURES = Path(__file__).parent / "fixtures" / "aws"


def _parse_ec2(operation: str, xml_file: str) -> dict[str, object]:
    """botocore's own EC2 response parser on a recorded body, as a live call would parse it."""
    import botocore.session
    from botocore.parsers import create_parser

    op = botocore.session.get_session().get_service_model("ec2").operation_model(operation)
    body = (FIXTURES / xml_file).read_bytes()
    parsed: dict[str, object] = create_parser("ec2").parse(
        {"body": body, "headers": {}, "status_code": 200}, op.output_shape)
    return parsed


def test_recorded_describe_instances_parses() -> None:
    """apache/libcloud @ 88c468ad96b03e636fc42d78b47085088b978bc6,
    libcloud/test/compute/fixtures/ec2/describe_instances_with_tags.xml (a recorded DescribeInstances answer)."""
    parsed = _parse_ec2("DescribeInstances", "describe_instances_with_tags.xml")
    [reservation] = parsed["Reservations"]  # type: ignore[misc]
    [raw] = reservation["Instances"]
    inst = to_instance("us-west-1", raw)
    assert inst.instance_id == "us-west-1/i-8474834a" and inst.state is InstanceState.PENDING
    assert inst.raw_state == "pending" and inst.instance_type == "m1.micro" and inst.zone == "us-west-1a"
    assert (inst.public_ip, inst.private_ip) == ("1.2.3.5", "1.2.3.5")
    assert inst.market is Market.ON_DEMAND and inst.created_at == datetime(2009, 8, 7, 5, 47, 4, tzinfo=UTC)
    assert inst.launch_id is None and inst.owner is None, "not orch's: no orch tags"


def test_recorded_security_groups_parse() -> None:
    """apache/libcloud @ 3eb83bce3432ea876e25381409600a8d9f83eac9,
    libcloud/test/compute/fixtures/ec2/describe_security_groups.xml."""
    from providers.aws.network import _ssh_ranges

    groups = _parse_ec2("DescribeSecurityGroups", "describe_security_groups.xml")["SecurityGroups"]
    assert [g["GroupId"] for g in groups] == ["sg-443d0a12", "sg-5ff8a023"]  # type: ignore[attr-defined]
    # Port 80 from anywhere, and a group-sourced range: neither is an SSH rule orch would count as its own.
    assert [_ssh_ranges(g) for g in groups] == [set(), set()]  # type: ignore[attr-defined]
    web = dict(groups[0])  # type: ignore[index]
    web["IpPermissions"] = [{**web["IpPermissions"][0], "FromPort": 22, "ToPort": 22}]
    assert _ssh_ranges(web) == {"0.0.0.0/0"}


def test_the_jobs_container_image_is_never_sent_as_the_ami(fake: FakeAws) -> None:
    """``image:`` is the job's container (run by docker on the machine): EC2 gets the machine image (the AMI)."""
    p = AwsProvider(_settings(fake, ami="ami-0123456789abcdef0"), session=_session())
    p.launch(_spec(image="pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"))
    assert fake.sent["RunInstances"]["ImageId"] == "ami-0123456789abcdef0"


def test_user_data_is_measured_as_it_is_sent() -> None:
    from orchestrator.runtime.startup import payload_size
    from providers.aws.run_instances import user_data

    script = "#!/bin/sh\n" + "echo orch\n" * 500
    assert payload_size("aws", script) == len(user_data(script)) < len(script) // 10
    assert user_data("") == ""
