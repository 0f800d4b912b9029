"""RunPodProvider against the RunPod GraphQL fake: offers, deploy inputs, idempotency, states, stop, errors."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from providers.base import (
    Capability,
    GpuRequest,
    InstanceState,
    LaunchSpec,
    Market,
    Offer,
    OfferOrigin,
    instance_name,
    new_launch_id,
)
from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)
from providers.registry import create_provider, load_settings
from providers.runpod import settings as runpod_settings
from providers.runpod.adapter import RunPodProvider
from providers.runpod.errors import NO_CAPACITY_PREFIXES, translate_error
from providers.runpod.settings import CloudType, Settings
from tests.contract.harness_runpod import PUBLIC_KEY, a100_offer, fast_settings
from tests.fakes.lr_base import FakeServer
from tests.fakes.runpod import NO_CAPACITY, OLD_NO_CAPACITY, RunPodFake, start_runpod_fake

OWNER = "alice"


@pytest.fixture
def cloud() -> Iterator[tuple[RunPodFake, FakeServer]]:
    fake, server = start_runpod_fake()
    yield fake, server
    server.stop()


@pytest.fixture
def fake(cloud: tuple[RunPodFake, FakeServer]) -> RunPodFake:
    return cloud[0]


def make(cloud: tuple[RunPodFake, FakeServer], **changes: object) -> RunPodProvider:
    return RunPodProvider(fast_settings(f"{cloud[1].url}/graphql").model_copy(update=changes))


@pytest.fixture
def provider(cloud: tuple[RunPodFake, FakeServer]) -> Iterator[RunPodProvider]:
    p = make(cloud)
    yield p
    p.close()


def spec(launch_id: str | None = None, offer: Offer | None = None, script: str = "") -> LaunchSpec:
    return LaunchSpec(launch_id=launch_id or new_launch_id(), owner=OWNER, job="train", offer=offer or a100_offer(),
                      ssh_public_key=PUBLIC_KEY, startup_script=script, disk_gb=80)


def deploys(fake: RunPodFake) -> list[dict]:
    return [op["variables"]["input"] for op in fake.operations() if "podFindAndDeployOnDemand" in op["query"]]


# -- translate_error ----------------------------------------------------------------------------------

def _gql_error(message: str, code: str | None = None) -> httpx.Response:
    err: dict = {"message": message}
    if code:
        err["extensions"] = {"code": code}
    return httpx.Response(200, json={"errors": [err], "data": {"x": None}})


@pytest.mark.parametrize(("response", "error"), [
    (_gql_error(NO_CAPACITY), InsufficientCapacityError),
    (_gql_error(NO_CAPACITY, "INTERNAL_SERVER_ERROR"), InsufficientCapacityError),
    (_gql_error(OLD_NO_CAPACITY), InsufficientCapacityError),
    (_gql_error("You do not have enough funds to deploy this pod.", "INSUFFICIENT_BALANCE"), QuotaExceededError),
    (_gql_error("pod not found to terminate", "INTERNAL_SERVER_ERROR"), InstanceNotFoundError),
    (_gql_error('Field "bogus" is not defined by type "PodFindAndDeployOnDemandInput".', "BAD_USER_INPUT"),
     InvalidRequestError),
    (_gql_error("Something broke", "INTERNAL_SERVER_ERROR"), ProviderUnavailableError),
    (_gql_error("Unauthorized", "UNAUTHENTICATED"), AuthError),
    (httpx.Response(401, text="Unauthorized"), AuthError),
    (httpx.Response(403, json={"errors": [{"message": "forbidden"}]}), AuthError),
    (httpx.Response(429, text="slow down"), RateLimitedError),
    (httpx.Response(502, text="<html>bad gateway</html>"), ProviderUnavailableError),
    (httpx.Response(400, json={"errors": [{"message": "Syntax Error"}]}), InvalidRequestError),
])
def test_translate_error(response: httpx.Response, error: type) -> None:
    assert type(translate_error(response)) is error


def test_translate_error_passes_successes() -> None:
    assert translate_error(httpx.Response(200, json={"data": {"pod": None}})) is None
    assert NO_CAPACITY.lower().startswith(NO_CAPACITY_PREFIXES[0])
    assert OLD_NO_CAPACITY.lower().startswith(NO_CAPACITY_PREFIXES[1])


# -- offers -------------------------------------------------------------------------------------------

def test_offers_price_count_times_the_per_gpu_price(provider: RunPodProvider, fake: RunPodFake) -> None:
    offers = {o.gpu: o for o in provider.offers(GpuRequest(count=2))}
    assert set(offers) == {"A100-80G", "H100-80G", "RTX4090-24G"}  # A40: no secure stock
    a100 = offers["A100-80G"]
    assert a100.price_hr == pytest.approx(3.28) and a100.offer_id == "NVIDIA A100 80GB PCIe"
    assert a100.instance_type == "2x_NVIDIA A100 80GB PCIe_SECURE" and a100.source is OfferOrigin.LIVE
    assert a100.vcpus == 16 and a100.market is Market.ON_DEMAND
    [query] = fake.operations()
    assert query["variables"] == {"lowestPriceInput": {"gpuCount": 2, "secureCloud": True}}


def test_offers_skip_types_without_stock(provider: RunPodProvider, fake: RunPodFake) -> None:
    fake.gpu_types[1].secure_stock = None  # H100: stockStatus null
    assert "H100-80G" not in {o.gpu for o in provider.offers(GpuRequest(count=1))}
    assert provider.offers(GpuRequest(count=9)) == []  # above every type's maxGpuCount


def test_offers_for_all_clouds(cloud: tuple[RunPodFake, FakeServer]) -> None:
    p = make(cloud, cloud_type=CloudType.ALL)
    a100 = sorted((o.instance_type, o.price_hr) for o in p.offers(GpuRequest(gpus=("A100-80G",), count=1)))
    assert a100 == [("1x_NVIDIA A100 80GB PCIe_COMMUNITY", 1.19), ("1x_NVIDIA A100 80GB PCIe_SECURE", 1.64)]
    p.close()


def test_no_spot_offers_or_launches(provider: RunPodProvider) -> None:
    assert Capability.SPOT not in RunPodProvider.capabilities and Capability.STOP in RunPodProvider.capabilities
    assert provider.offers(GpuRequest(count=1, markets=frozenset({Market.SPOT}))) == []
    with pytest.raises(InvalidRequestError, match="on-demand"):
        provider.launch(spec(offer=replace(a100_offer(), market=Market.SPOT)))


# -- launch -------------------------------------------------------------------------------------------

def test_deploy_input(provider: RunPodProvider, fake: RunPodFake) -> None:
    s = spec(script="#!/bin/sh\necho hi\n")
    inst = provider.launch(s)
    [inp] = deploys(fake)
    env = {e["key"]: e["value"] for e in inp.pop("env")}
    # sh and python3 only (the pod's image may have no bash or base64), then the image's own entrypoint.
    assert inp.pop("dockerArgs").startswith("sh -c '(python3 -c ")
    assert inp == {"name": instance_name(OWNER, s.launch_id), "imageName": Settings.model_fields["image"].default,
                   "gpuTypeId": "NVIDIA A100 80GB PCIe", "cloudType": "SECURE", "gpuCount": 2,
                   "containerDiskInGb": 50, "volumeInGb": 80, "volumeMountPath": "/workspace",
                   "ports": "22/tcp,10022/tcp", "startSsh": True, "supportPublicIp": True, "countryCode": "US"}
    assert env["ORCH_LAUNCH_ID"] == s.launch_id and env["ORCH_OWNER"] == OWNER and env["PUBLIC_KEY"] == PUBLIC_KEY
    assert base64.b64decode(env["ORCH_BOOT_B64"]).decode() == s.startup_script
    assert (inst.launch_id, inst.owner, inst.state, inst.raw_state) == (s.launch_id, OWNER, InstanceState.PENDING,
                                                                          "RUNNING")


def test_launch_is_idempotent_by_name(provider: RunPodProvider, fake: RunPodFake) -> None:
    s = spec()
    first = provider.launch(s)
    assert provider.launch(s).instance_id == first.instance_id
    assert provider.launch(spec()).instance_id != first.instance_id
    assert len(deploys(fake)) == 2


def test_catalog_offer_resolves_the_gpu_type(provider: RunPodProvider, fake: RunPodFake) -> None:
    catalog = replace(a100_offer(1), instance_type="1x_A100-80GB_COMMUNITY", offer_id=None, region="CA",
                      zone="CA-MTL-1")
    provider.launch(spec(offer=catalog))
    [inp] = deploys(fake)
    assert (inp["gpuTypeId"], inp["cloudType"], inp["countryCode"], inp["dataCenterId"]) == (
        "NVIDIA A100 80GB PCIe", "COMMUNITY", "CA", "CA-MTL-1")


def test_no_capacity_is_raised_at_once(provider: RunPodProvider, fake: RunPodFake) -> None:
    fake.gpu_types[0].secure_stock = None
    with pytest.raises(InsufficientCapacityError):
        provider.launch(spec())
    assert len(deploys(fake)) == 1


# -- get / stop / terminate / list --------------------------------------------------------------------

def test_pending_then_running_with_ssh(provider: RunPodProvider) -> None:
    inst = provider.launch(spec())
    first = provider.get(inst.instance_id)
    assert first is not None and first.state is InstanceState.PENDING and first.public_ip is None
    running = provider.get(inst.instance_id)
    assert running is not None and running.state is InstanceState.RUNNING
    assert running.public_ip == "203.0.113.10" and running.ssh_port >= 40000 and running.ssh_user == "root"
    assert running.price_hr == pytest.approx(3.28)


def test_ssh_falls_back_to_10022(provider: RunPodProvider, fake: RunPodFake) -> None:
    p = RunPodProvider(provider.settings.model_copy(update={"ports": "8888/http,10022/tcp"}))
    inst = p.launch(spec())
    p.get(inst.instance_id)
    got = p.get(inst.instance_id)
    assert got is not None and got.public_ip == "203.0.113.10"
    p.close()


def test_stop_then_terminate(provider: RunPodProvider) -> None:
    inst = provider.launch(spec())
    provider.stop(inst.instance_id)
    stopped = provider.get(inst.instance_id)
    assert stopped is not None and stopped.state is InstanceState.STOPPED and stopped.raw_state == "EXITED"
    provider.terminate(inst.instance_id)
    assert provider.get(inst.instance_id) is None
    provider.terminate(inst.instance_id)  # "pod not found to terminate" is success


def test_stop_missing_is_not_found(provider: RunPodProvider) -> None:
    with pytest.raises(InstanceNotFoundError):
        provider.stop("zzzzzzzzzzzzzz")


def test_list_instances_by_owner(provider: RunPodProvider) -> None:
    mine = provider.launch(spec())
    bob = provider.launch(replace(spec(), owner="bob"))
    assert [i.instance_id for i in provider.list_instances(OWNER)] == [mine.instance_id]
    assert [i.instance_id for i in provider.list_instances("bob")] == [bob.instance_id]


def test_transient_errors_are_retried(provider: RunPodProvider, fake: RunPodFake) -> None:
    fake.faults.arm("server_error", 1)
    fake.faults.arm("throttle", 1)
    assert provider.offers(GpuRequest(count=1))
    assert [r.status for r in fake.requests] == [429, 502, 200]


# -- credentials, settings, the fake's GraphQL ---------------------------------------------------------

def test_wrong_key(cloud: tuple[RunPodFake, FakeServer]) -> None:
    p = RunPodProvider(fast_settings(f"{cloud[1].url}/graphql", api_key="nope"))
    with pytest.raises(AuthError, match="RUNPOD_API_KEY"):
        p.check_credentials()
    p.close()


def test_no_key_found_is_said_so(cloud: tuple[RunPodFake, FakeServer]) -> None:
    """A call made with no key: "no API key found" and where a key comes from, not the cloud's "Unauthorized"."""
    p = RunPodProvider(fast_settings(f"{cloud[1].url}/graphql").model_copy(update={"api_key": None}))
    with pytest.raises(AuthError) as info:
        p.list_instances("tester")
    p.close()
    assert str(info.value).startswith("runpod: no API key found (set RUNPOD_API_KEY")


def test_key_from_env_then_cli_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[default]\napi_key = "rp_from_file"\n')
    monkeypatch.setattr(runpod_settings, "CONFIG_FILE", config)
    monkeypatch.setenv("RUNPOD_API_KEY", "rp_from_env")
    assert Settings().api_key == SecretStr("rp_from_env")
    monkeypatch.delenv("RUNPOD_API_KEY")
    s = Settings()
    assert s.api_key is not None and s.api_key.get_secret_value() == "rp_from_file" and "rp_from" not in repr(s)
    monkeypatch.setattr(runpod_settings, "CONFIG_FILE", tmp_path / "absent.toml")
    assert Settings().api_key is None


def test_registry_builds_it(cloud: tuple[RunPodFake, FakeServer]) -> None:
    p = create_provider("runpod", load_settings("runpod", {"api_key": "test-key",
                                                       "graphql_url": f"{cloud[1].url}/graphql"}))
    assert isinstance(p, RunPodProvider)
    p.check_credentials()
    p.close()


def _post(server: FakeServer, query: str, variables: dict | None = None) -> httpx.Response:
    return httpx.post(f"{server.url}/graphql", json={"query": query, "variables": variables or {}},
                      headers={"Authorization": "Bearer test-key"})


def test_fake_parses_inline_inputs_and_prunes_to_the_selection(cloud: tuple[RunPodFake, FakeServer]) -> None:
    _, server = cloud
    r = _post(server, 'mutation { podFindAndDeployOnDemand(input: {name: "x", gpuTypeId: "NVIDIA L40S" '
                      "gpuCount: 1, cloudType: SECURE}) { id } }")
    assert r.json()["errors"][0]["message"].startswith("Invalid GPU type id")
    r = _post(server, 'mutation { podFindAndDeployOnDemand(input: {name: "x", gpuTypeId: "NVIDIA GeForce RTX 4090", '
                      "gpuCount: 1, cloudType: COMMUNITY, ports: \"22/tcp\"}) { id costPerHr } }")
    pod = r.json()["data"]["podFindAndDeployOnDemand"]
    assert set(pod) == {"id", "costPerHr"} and pod["costPerHr"] == 0.34
    assert _post(server, 'query { pod(input: {podId: "nope"}) { id } }').json() == {"data": {"pod": None}}


def test_fake_refuses_undeclared_variables_and_unknown_fields(cloud: tuple[RunPodFake, FakeServer]) -> None:
    _, server = cloud
    r = _post(server, "query { pod(input: $input) { id } }", {"input": {"podId": "x"}})
    assert r.status_code == 400 and "not defined" in r.json()["errors"][0]["message"]
    _post(server, 'mutation { podFindAndDeployOnDemand(input: {gpuTypeId: "NVIDIA GeForce RTX 4090"}) { id } }')
    r = _post(server, "query { myself { pods { id spotBid } } }")
    assert r.status_code == 400 and "spotBid" in r.json()["errors"][0]["message"]


# -- RunPod's published field examples (tests/fixtures/runpod/PROVENANCE.md) ----------------------------------------

def test_published_pod_example_parses() -> None:
    """runpod/docs @ 01242f8510a3aba07200e152c2e33e07bd0a8e3f, api-reference/openapi.json, components.schemas.Pod:
    the example values of the fields orch's GraphQL pod query shares, and the desiredStatus enum."""
    import json

    from providers.base import InstanceState
    from providers.runpod.instances import to_instance

    facts = json.loads((Path(__file__).parent / "fixtures" / "runpod" / "pod_examples.json").read_text())
    pod = {**facts["pod"], "name": "orch-alice-l0123456789ab", "desiredStatus": "RUNNING", "runtime": None}
    inst = to_instance(pod)
    assert inst.instance_id == "xedezhzb9la3ye" and inst.owner == "alice" and inst.launch_id == "l0123456789ab"
    assert inst.raw_reason == facts["pod"]["lastStatusChange"] and ("machine_id", "s194cr8pls2z") in inst.extra
    assert inst.price_hr == 0.74, "the example's costPerHr is the string '0.74': read as the price it bills"
    assert inst.state is InstanceState.PENDING            # RUNNING without a runtime yet
    states = {s: to_instance({**pod, "desiredStatus": s}).state for s in facts["desiredStatus_enum"]}
    assert states == {"RUNNING": InstanceState.PENDING, "EXITED": InstanceState.STOPPED,
                      "TERMINATED": InstanceState.TERMINATED}
