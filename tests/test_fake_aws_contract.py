"""The AWS fake holds every EC2 request to EC2's contract (tests/fakes/aws_contract.py), and the adapter turns
each refusal EC2 would give into orch's typed error.

The contract is botocore's own EC2 service model plus the limits it does not state (ImageId form, 16 KB user
data); refusals carry EC2's codes and wordings."""

from __future__ import annotations

import base64
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlencode

import boto3
import pytest
from botocore.exceptions import ClientError

from providers.aws.adapter import AwsProvider
from providers.aws.settings import Settings
from providers.base import LaunchSpec, Market, new_launch_id
from providers.errors import (
    InsufficientCapacityError,
    InvalidRequestError,
    PriceTooLowError,
    ProviderError,
    QuotaExceededError,
)
from tests.contract.harness_aws import REGION, catalog_offer
from tests.fakes.aws import FAKE_ENV, FakeAws
from tests.fakes.aws_contract import USER_DATA_MAX, check_request


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAws]:
    f = FakeAws()
    yield f
    f.close()


def _session() -> boto3.Session:
    return boto3.Session(aws_access_key_id=FAKE_ENV["AWS_ACCESS_KEY_ID"],
                         aws_secret_access_key=FAKE_ENV["AWS_SECRET_ACCESS_KEY"], region_name=REGION)


@pytest.fixture
def aws(fake: FakeAws) -> Iterator[AwsProvider]:
    fake.reset()
    settings = Settings(regions=[REGION], endpoint_url=fake.endpoint_url, ami_owners=["099720109477"],
                        ami_name_pattern="ubuntu/images/hvm-ssd/ubuntu-*-amd64-server-*", retry_attempts=2,
                        retry_initial_wait_s=0.001, retry_max_wait_s=0.01, retry_deadline_s=600.0)
    p = AwsProvider(settings, session=_session())
    yield p
    p.close()


def _ec2(fake: FakeAws):  # type: ignore[no-untyped-def]
    return _session().client("ec2", endpoint_url=fake.endpoint_url, region_name=REGION)


def _ami(fake: FakeAws) -> str:
    return str(_ec2(fake).describe_images(Owners=["099720109477"])["Images"][0]["ImageId"])


def _spec(market: Market = Market.ON_DEMAND, script: str = "#!/bin/sh\necho hi\n", **kw: object) -> LaunchSpec:
    return LaunchSpec(launch_id=new_launch_id(), owner="contract", job="j1", offer=catalog_offer(market),
                      startup_script=script, **kw)  # type: ignore[arg-type]


def _raw(fake: FakeAws, params: dict[str, str]) -> tuple[int, str]:
    """A hand-made query request (boto3 would refuse to send it), scoped to ec2 like a SigV4 request."""
    req = urllib.request.Request(fake.endpoint_url + "/", data=urlencode(params).encode(), method="POST", headers={
        "Content-Type": "application/x-www-form-urlencoded",
        "Authorization": f"AWS4-HMAC-SHA256 Credential=testing/20260101/{REGION}/ec2/aws4_request, "
                         "SignedHeaders=host, Signature=0"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


# -- the contract itself, request by request -----------------------------------------------------------

def test_model_checks_run_instances_parameters() -> None:
    ok = {"Action": "RunInstances", "Version": "2016-11-15", "ImageId": "ami-0123456789abcdef0", "MinCount": "1",
          "MaxCount": "1", "InstanceType": "g5.xlarge", "TagSpecification.1.ResourceType": "instance",
          "TagSpecification.1.Tag.1.Key": "k", "TagSpecification.1.Tag.1.Value": "v",
          "InstanceMarketOptions.SpotOptions.MaxPrice": "1.0", "InstanceMarketOptions.MarketType": "spot"}
    assert check_request(ok) is None
    cases = {
        "Bogus": ("1", "UnknownParameter", "The parameter Bogus is not recognized"),
        "TagSpecification.1.Tags.1.Key": ("k", "UnknownParameter", "TagSpecification.1.Tags"),
        "InstanceType": ("g5.huge", "InvalidParameterValue", "Value (g5.huge) for parameter InstanceType"),
        "MinCount": ("one", "InvalidParameterValue", "MinCount"),
        "InstanceMarketOptions.MarketType": ("cheap", "InvalidParameterValue", "MarketType"),
    }
    for key, (value, code, words) in cases.items():
        refusal = check_request({**ok, key: value})
        assert refusal is not None and refusal.code == code and words in refusal.message, (key, refusal)
    missing = check_request({k: v for k, v in ok.items() if k != "MinCount"})
    assert missing is not None and (missing.code, missing.message) == (
        "MissingParameter", "The request must contain the parameter MinCount")
    assert check_request({"Action": "RunInstancez"}).code == "InvalidAction"  # type: ignore[union-attr]


@pytest.mark.parametrize("image", ["pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", "ubuntu-22.04", "ami-123",
                                   "ami-0123456789ABCDEF0", "ami-0123456789abcdef"])
def test_malformed_image_ids_are_refused(image: str) -> None:
    refusal = check_request({"Action": "RunInstances", "ImageId": image, "MinCount": "1", "MaxCount": "1"})
    assert refusal is not None and refusal.code == "InvalidAMIID.Malformed"
    assert refusal.message == f'Invalid id: "{image}" (expecting "ami-...")'


def test_user_data_limit_is_16_kib_raw() -> None:
    def run(raw: bytes) -> object:
        return check_request({"Action": "RunInstances", "ImageId": "ami-12345678", "MinCount": "1",
                              "MaxCount": "1", "UserData": base64.b64encode(raw).decode()})
    assert run(os.urandom(USER_DATA_MAX)) is None
    over = run(os.urandom(USER_DATA_MAX + 1))
    assert over is not None and (over.code, over.message) == (   # type: ignore[attr-defined]
        "InvalidParameterValue", "User data is limited to 16384 bytes")


def test_fake_answers_refusals_in_ec2_error_xml(fake: FakeAws) -> None:
    fake.reset()
    status, body = _raw(fake, {"Action": "RunInstances", "Version": "2016-11-15", "MaxCount": "1",
                               "ImageId": "ami-12345678"})
    assert status == 400
    assert "<Code>MissingParameter</Code>" in body and "the parameter MinCount" in body
    assert fake.refusals[-1][0] == "RunInstances"


def test_boto3_sees_ec2_codes(fake: FakeAws) -> None:
    fake.reset()
    ec2 = _ec2(fake)
    with pytest.raises(ClientError) as bad_image:
        ec2.run_instances(ImageId="pytorch/pytorch:latest", MinCount=1, MaxCount=1)
    assert bad_image.value.response["Error"]["Code"] == "InvalidAMIID.Malformed"
    with pytest.raises(ClientError) as big:
        ec2.run_instances(ImageId=_ami(fake), MinCount=1, MaxCount=1, UserData="x" * (USER_DATA_MAX + 1))
    assert big.value.response["Error"]["Message"] == "User data is limited to 16384 bytes"
    ec2.run_instances(ImageId=_ami(fake), MinCount=1, MaxCount=1, UserData="x" * USER_DATA_MAX)  # at the limit


# -- the adapter's own requests, and each known refusal as a typed error -------------------------------

def test_the_adapter_s_requests_are_all_accepted(aws: AwsProvider, fake: FakeAws) -> None:
    on_demand = aws.launch(_spec())
    spot = aws.launch(_spec(Market.SPOT, max_price_hr=4.25))
    aws.list_instances("contract")
    aws.get(on_demand.instance_id)
    for inst in (on_demand, spot):
        aws.terminate(inst.instance_id)
    assert fake.requests["RunInstances"] == 2
    assert fake.refusals == []


def test_bad_image_form_is_an_invalid_request(aws: AwsProvider, fake: FakeAws) -> None:
    aws._amis[REGION] = ("ubuntu-22.04-cuda", 0)   # what a machine-image setting that is not an AMI id resolves to
    with pytest.raises(InvalidRequestError) as err:
        aws.launch(_spec())
    assert err.value.code == "InvalidAMIID.Malformed"
    assert fake.refusals[-1][1].code == "InvalidAMIID.Malformed"


def _root_snapshot(fake: FakeAws) -> tuple[str, str, int]:
    """moto's Ubuntu AMI: (its id, its root device, the size of its root snapshot in GB)."""
    image = _ec2(fake).describe_images(ImageIds=[_ami(fake)])["Images"][0]
    [root] = [m for m in image["BlockDeviceMappings"] if m["DeviceName"] == image["RootDeviceName"]]
    return image["ImageId"], image["RootDeviceName"], int(root["Ebs"]["VolumeSize"])


def test_a_volume_smaller_than_the_ami_s_snapshot_is_refused_as_ec2_does(fake: FakeAws) -> None:
    fake.reset()
    image, device, floor = _root_snapshot(fake)
    with pytest.raises(ClientError) as err:
        _ec2(fake).run_instances(ImageId=image, InstanceType="g5.xlarge", MinCount=1, MaxCount=1,
                                 BlockDeviceMappings=[{"DeviceName": device, "Ebs": {"VolumeSize": floor - 1}}])
    assert err.value.response["Error"]["Code"] == "InvalidBlockDeviceMapping"
    assert f"Volume of size {floor - 1}GB is smaller than snapshot 'snap-" in err.value.response["Error"]["Message"]
    assert err.value.response["Error"]["Message"].endswith(f"expect size >= {floor}GB")
    _ec2(fake).run_instances(ImageId=image, InstanceType="g5.xlarge", MinCount=1, MaxCount=1,
                             BlockDeviceMappings=[{"DeviceName": device, "Ebs": {"VolumeSize": floor}}])


@pytest.mark.parametrize("configured_ami", [False, True])
def test_a_job_disk_under_the_ami_s_snapshot_rents_the_snapshot_s_size(fake: FakeAws, configured_ami: bool) -> None:
    """A job's disk_gb is the least it needs: under the AMI's root snapshot, EC2 refuses the launch, so orch
    rents the snapshot's size instead (the AMI's size read from DescribeImages, looked up or configured)."""
    fake.reset()
    image, _, floor = _root_snapshot(fake)
    settings = Settings(regions=[REGION], endpoint_url=fake.endpoint_url, ami=image if configured_ami else None,
                        ami_owners=["099720109477"], ami_name_pattern="ubuntu/images/hvm-ssd/ubuntu-*-amd64-server-*",
                        retry_attempts=2, retry_initial_wait_s=0.001, retry_max_wait_s=0.01, retry_deadline_s=600.0)
    p = AwsProvider(settings, session=_session())
    try:
        p.launch(_spec(disk_gb=floor - 5))
        assert fake.refusals == []
        assert fake.sent["RunInstances"]["BlockDeviceMapping.1.Ebs.VolumeSize"] == str(floor)
        p.launch(_spec(disk_gb=floor + 5))   # above it: the job's own size
        assert fake.sent["RunInstances"]["BlockDeviceMapping.1.Ebs.VolumeSize"] == str(floor + 5)
    finally:
        p.close()


def test_oversize_user_data_is_refused_before_or_by_ec2(aws: AwsProvider, fake: FakeAws) -> None:
    # Incompressible (orch sends user data gzip'd): twice the limit in random bytes' hex stays over it.
    script = "#!/bin/sh\n#" + os.urandom(USER_DATA_MAX).hex()
    with pytest.raises(ProviderError) as err:
        aws.launch(_spec(script=script))
    assert isinstance(err.value, InvalidRequestError)
    # Either orch refuses it before spending (no RunInstances reached EC2) or EC2's refusal came back typed.
    assert fake.requests["RunInstances"] == 0 or err.value.code == "InvalidParameterValue"


@pytest.mark.parametrize(("fault", "error"), [
    ("capacity", InsufficientCapacityError),
    ("quota", QuotaExceededError),
    ("price-too-low", PriceTooLowError),
])
def test_known_refusals_are_typed(aws: AwsProvider, fake: FakeAws, fault: str, error: type) -> None:
    fake.fail("RunInstances", fault)
    market = Market.SPOT if fault == "price-too-low" else Market.ON_DEMAND
    kw = {"max_price_hr": 0.001} if market is Market.SPOT else {}
    with pytest.raises(error) as err:
        aws.launch(_spec(market, **kw))
    assert err.value.message != f"injected {err.value.code}"   # EC2's own wording came back
