"""AWS adapter details beyond the contract: error translation, what RunInstances is sent, spot prices."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import botocore.exceptions
import pytest
from botocore.stub import Stubber

from providers.aws.adapter import translate_error
from providers.base import TAG_JOB, TAG_LAUNCH_ID, TAG_OWNER, GpuRequest, InstanceState, Market, new_launch_id
from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    PriceTooLowError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)
from tests.contract.harness_aws import AwsHarness


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsHarness]:
    h = AwsHarness()
    yield h
    h.close()


def client_error(code: str, status: int = 400) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "RunInstances")


@pytest.mark.parametrize(
    ("code", "status", "cls"),
    [("InsufficientInstanceCapacity", 500, InsufficientCapacityError),
     ("SpotMaxPriceTooLow", 400, PriceTooLowError),
     ("MaxSpotInstanceCountExceeded", 400, InsufficientCapacityError),
     ("VcpuLimitExceeded", 400, QuotaExceededError),
     ("InstanceLimitExceeded", 400, QuotaExceededError),
     ("RequestLimitExceeded", 503, RateLimitedError),
     ("UnauthorizedOperation", 403, AuthError),
     ("AuthFailure", 401, AuthError),
     ("InvalidInstanceID.NotFound", 400, InstanceNotFoundError),
     ("InternalError", 500, ProviderUnavailableError),
     ("InvalidParameterValue", 400, InvalidRequestError)],
)
def test_translate_error(code: str, status: int, cls: type) -> None:
    err = translate_error(client_error(code, status))
    assert type(err) is cls and err.code == code and err.provider == "aws"


def test_translate_transport_and_credential_errors() -> None:
    assert isinstance(translate_error(botocore.exceptions.NoCredentialsError()), AuthError)
    assert isinstance(translate_error(botocore.exceptions.EndpointConnectionError(endpoint_url="http://x")),
                      ProviderUnavailableError)


def test_spot_launch_sends_market_options_tags_and_user_data(aws: AwsHarness) -> None:
    aws.reset()
    p = aws.provider()
    spec = aws.launch_spec(new_launch_id(), "alice", Market.SPOT)
    spec = type(spec)(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__}, "max_price_hr": 3.5})
    inst = p.launch(spec)
    assert inst.market is Market.SPOT and inst.state in (InstanceState.PENDING, InstanceState.RUNNING)
    ec2 = p._client("ec2", "us-east-1")
    raw = ec2.describe_instances(InstanceIds=[inst.instance_id.split("/")[1]])["Reservations"][0]["Instances"][0]
    tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
    assert tags[TAG_LAUNCH_ID] == spec.launch_id and tags[TAG_OWNER] == "alice" and tags[TAG_JOB] == "contract"
    assert tags["Name"] == spec.name
    assert raw["InstanceLifecycle"] == "spot" and raw["InstanceType"] == "p4d.24xlarge"
    sent = aws.fake.last_params["RunInstances"]
    assert sent["InstanceMarketOptions.MarketType"] == "spot"
    assert sent["InstanceMarketOptions.SpotOptions.MaxPrice"] == "3.5000"
    assert sent["ClientToken"] == spec.launch_id
    import base64

    assert base64.b64decode(sent["UserData"]).decode() == spec.startup_script


def test_a_second_launch_with_the_same_id_finds_the_first_even_without_client_token(aws: AwsHarness) -> None:
    aws.reset()
    p = aws.provider()
    spec = aws.launch_spec(new_launch_id(), "alice")
    first = p.launch(spec)
    second = p.launch(spec)     # moto ignores ClientToken: only the tag lookup prevents a second machine
    assert first.instance_id == second.instance_id
    assert aws.fake.actions["RunInstances"] == 1


def test_live_spot_prices_replace_the_catalog_and_stale_history_is_ignored(aws: AwsHarness) -> None:
    aws.reset()
    p = aws.provider()
    req = GpuRequest(gpus=("A100-40G",), count=8, markets=frozenset({Market.SPOT}))
    # moto's price history is a constant from 2006: stale, so the catalog's spot price stays.
    stale = p.offers(req)
    assert [o.source for o in stale] == ["catalog"] and stale[0].price_hr == pytest.approx(2.4655)
    ec2 = p._client("ec2", "us-east-1")
    now = datetime.now(UTC)
    with Stubber(ec2) as stub:
        stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
            {"InstanceType": "p4d.24xlarge", "AvailabilityZone": "us-east-1a", "SpotPrice": "3.10", "Timestamp": now},
            {"InstanceType": "p4d.24xlarge", "AvailabilityZone": "us-east-1b", "SpotPrice": "2.90", "Timestamp": now},
        ]})
        live = p.offers(req)
    assert [(o.zone, o.price_hr, o.source) for o in live] == [("us-east-1b", 2.9, "live"), ("us-east-1a", 3.1, "live")]
