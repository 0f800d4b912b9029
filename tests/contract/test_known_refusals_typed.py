"""Each known refusal of Vast.ai, Lambda and RunPod, answered by the spec-validating fake in the provider's own
error shape, reaches orch as the typed error (providers/errors.py) the engine acts on.

The VM clouds' refusals (bad image form, oversize user data, capacity, quota, price too low) are held in
tests/test_fake_aws_contract.py, tests/test_gce_fake_contract.py and tests/test_fake_azure_contract.py; capacity
and quota of every provider also in tests/contract/test_contract.py. Here: what the pod and GPU clouds refuse.
A refusal the adapter never provokes itself (a body outside the spec) is sent raw and its answer goes through
the adapter's own ``translate_error``, the one place that provider's failures become orch's errors.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

from providers.base import Market, new_launch_id
from providers.errors import (
    InsufficientCapacityError,
    InvalidRequestError,
    PriceTooLowError,
    QuotaExceededError,
)
from tests.contract.harness_lambda import LambdaHarness
from tests.contract.harness_runpod import RunPodHarness
from tests.contract.harness_vastai import ASK_ID, VastHarness
from tests.fakes.runpod import NO_BALANCE, NO_CAPACITY, OLD_NO_CAPACITY

OWNER = "refusals"


# -- Vast.ai ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vast_cloud() -> Iterator[VastHarness]:
    h = VastHarness()
    yield h
    h.close()


@pytest.fixture
def vast(vast_cloud: VastHarness) -> Iterator[VastHarness]:
    vast_cloud.reset()
    yield vast_cloud
    vast_cloud.reset()


@pytest.mark.parametrize(("fault", "error", "vast_code"), [
    ("capacity", InsufficientCapacityError, "no_such_ask"),
    ("quota", QuotaExceededError, "insufficient_credit"),
])
def test_vast_capacity_and_quota(vast: VastHarness, fault: str, error: type, vast_code: str) -> None:
    vast.fake.inject(fault, 1)
    with pytest.raises(error) as err:
        vast.provider().launch(vast.launch_spec(new_launch_id(), OWNER))
    assert err.value.code == vast_code


def test_vast_a_bid_below_the_asks_minimum_is_price_too_low(vast: VastHarness) -> None:
    spec = vast.launch_spec(new_launch_id(), OWNER, Market.SPOT)
    vast.fake.state.min_bid_rises[ASK_ID] = 0.5     # min_bid 0.18 when searched, 0.5 when the bid (0.198) lands
    with pytest.raises(PriceTooLowError) as err:
        vast.provider().launch(spec)
    assert err.value.code == "invalid_price" and "below the minimum bid" in err.value.message
    assert vast.fake.state.instances == {}


def _raw_create(vast: VastHarness, body: dict[str, object]) -> httpx.Response:
    with httpx.Client(base_url=vast.base_url, headers={"Authorization": "Bearer vast-test-key"}) as raw:
        return raw.put(f"/asks/{ASK_ID}/", json={"client_id": "me", "image": "pytorch/pytorch", **body})


def test_vast_an_onstart_over_4048_characters_is_refused_by_vast_and_typed(vast: VastHarness) -> None:
    from providers.vastai.errors import translate_error

    answer = _raw_create(vast, {"onstart": "true\n" * 1000})
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_args"
    err = translate_error(answer)
    assert isinstance(err, InvalidRequestError) and "4048" in err.message
    assert vast.fake.state.refusals == ["onstart"] and vast.fake.state.instances == {}


def test_vast_a_body_outside_the_spec_is_refused_and_typed(vast: VastHarness) -> None:
    from providers.vastai.errors import translate_error

    answer = _raw_create(vast, {"runtype": "telnet"})
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_args"
    assert isinstance(translate_error(answer), InvalidRequestError)
    assert vast.fake.state.refusals and vast.fake.state.refusals[0].startswith("runtype:")


# -- Lambda -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lambda_cloud() -> Iterator[LambdaHarness]:
    h = LambdaHarness()
    yield h
    h.close()


@pytest.fixture
def lam(lambda_cloud: LambdaHarness) -> Iterator[LambdaHarness]:
    lambda_cloud.reset()
    yield lambda_cloud
    lambda_cloud.reset()


def _lambda_raw_launch(lam: LambdaHarness, **extra: object) -> httpx.Response:
    body = {"region_name": "us-east-1", "instance_type_name": "gpu_8x_h100_sxm5", "ssh_key_names": ["k"],
            "name": "raw", **extra}
    with httpx.Client(base_url=f"{lam.server.url}/api/v1", headers={"Authorization": "Bearer test-key"}) as raw:
        return raw.post("/instance-operations/launch", json=body)


@pytest.mark.parametrize("image", ["pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", {"name": "lambda-stack"}])
def test_lambda_an_image_not_in_the_specs_id_or_family_form_is_invalid(lam: LambdaHarness, image: object) -> None:
    from providers.lambdalabs.errors import translate_error

    answer = _lambda_raw_launch(lam, image=image)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "global/invalid-parameters"
    assert isinstance(translate_error(answer), InvalidRequestError)
    assert lam.fake.refusals and lam.fake.instances == {}


def test_lambda_user_data_over_1_mb_is_refused_by_lambda_and_typed(lam: LambdaHarness) -> None:
    spec = lam.launch_spec(new_launch_id(), OWNER)
    big = replace(spec, startup_script="#!/bin/sh\n#" + os.urandom(500_001).hex())
    with pytest.raises(InvalidRequestError) as err:
        lam.provider().launch(big)
    assert err.value.code == "global/invalid-parameters" and "1MB" in err.value.message
    assert lam.fake.refusals == ["user_data"] and lam.fake.instances == {}


def test_lambda_capacity_where_the_region_has_none(lam: LambdaHarness) -> None:
    from tests.contract.harness_lambda import h100_offer

    spec = lam.launch_spec(new_launch_id(), OWNER)
    elsewhere = replace(spec, offer=h100_offer("asia-northeast-1"))
    with pytest.raises(InsufficientCapacityError) as err:
        lam.provider().launch(elsewhere)
    assert err.value.code == "instance-operations/launch/insufficient-capacity"


# -- RunPod -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def runpod_cloud() -> Iterator[RunPodHarness]:
    h = RunPodHarness()
    yield h
    h.close()


@pytest.fixture
def runpod(runpod_cloud: RunPodHarness) -> Iterator[RunPodHarness]:
    runpod_cloud.reset()
    yield runpod_cloud
    runpod_cloud.reset()


@pytest.mark.parametrize(("fault", "wording", "error"), [
    ("capacity", NO_CAPACITY, InsufficientCapacityError),
    ("capacity", OLD_NO_CAPACITY, InsufficientCapacityError),
    ("quota", NO_BALANCE, QuotaExceededError),
])
def test_runpod_capacity_in_both_wordings_and_quota(runpod: RunPodHarness, fault: str, wording: str,
                                                    error: type) -> None:
    runpod.fake.no_capacity_message = wording if fault == "capacity" else NO_CAPACITY
    runpod.fake.faults.arm(fault, 1)
    with pytest.raises(error) as err:
        runpod.provider().launch(runpod.launch_spec(new_launch_id(), OWNER))
    assert err.value.message == wording and runpod.fake.pods == {}


_DEPLOY = ("mutation deploy($input: PodFindAndDeployOnDemandInput) "
           "{ podFindAndDeployOnDemand(input: $input) { id } }")


@pytest.mark.parametrize("bad", [{"gpuCount": "2"}, {"ports": "22/ssh"}, {"env": [{"key": "A"}]}])
def test_runpod_an_input_outside_the_schema_is_bad_user_input_and_typed(runpod: RunPodHarness,
                                                                         bad: dict[str, object]) -> None:
    from providers.runpod.errors import translate_error

    inp = {"name": "raw", "imageName": "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04",
           "gpuTypeId": "NVIDIA A100 80GB PCIe", "cloudType": "SECURE", "gpuCount": 1, **bad}
    with httpx.Client(base_url=runpod.server.url, headers={"Authorization": "Bearer test-key"}) as raw:
        answer = raw.post("/graphql", json={"query": _DEPLOY, "variables": {"input": inp}})
    assert answer.status_code == 200          # RunPod: GraphQL errors on HTTP 200
    [first] = answer.json()["errors"]
    assert first["extensions"]["code"] == "BAD_USER_INPUT"
    assert isinstance(translate_error(answer), InvalidRequestError)
    assert runpod.fake.refusals and runpod.fake.pods == {}
