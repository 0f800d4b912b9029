"""LambdaProvider against the Lambda fake: offers, launch (keys, names, idempotency), states, limits, errors."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from providers.base import (
    Availability,
    Capability,
    GpuRequest,
    InstanceState,
    Interconnect,
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
from providers.lambdalabs import settings as lambda_settings
from providers.lambdalabs.adapter import LambdaProvider
from providers.lambdalabs.errors import translate_error
from providers.lambdalabs.settings import Settings
from providers.registry import create_provider, load_settings
from tests.contract.harness_lambda import PUBLIC_KEY, fast_settings, h100_offer
from tests.fakes.lambda_cloud import API, DEFAULT_TYPES, LambdaFake, _Inst, start_lambda_fake
from tests.fakes.lr_base import FakeServer

OWNER = "alice"


@pytest.fixture
def cloud() -> Iterator[tuple[LambdaFake, FakeServer]]:
    fake, server = start_lambda_fake()
    yield fake, server
    server.stop()


@pytest.fixture
def fake(cloud: tuple[LambdaFake, FakeServer]) -> LambdaFake:
    return cloud[0]


@pytest.fixture
def provider(cloud: tuple[LambdaFake, FakeServer]) -> Iterator[LambdaProvider]:
    p = LambdaProvider(fast_settings(f"{cloud[1].url}/api/v1"), catalog=())
    yield p
    p.close()


def spec(launch_id: str | None = None, offer: Offer | None = None, key: str = PUBLIC_KEY,
         script: str = "") -> LaunchSpec:
    return LaunchSpec(launch_id=launch_id or new_launch_id(), owner=OWNER, job="train", offer=offer or h100_offer(),
                      ssh_public_key=key, startup_script=script)


def posts(fake: LambdaFake, path: str) -> list[dict]:
    return [r.body for r in fake.requests if r.method == "POST" and r.path == f"{API}{path}"]


# -- translate_error ----------------------------------------------------------------------------------

def _resp(status: int, code: str | None = None, text: str | None = None) -> httpx.Response:
    if code is not None:
        return httpx.Response(status, json={"error": {"code": code, "message": "m", "suggestion": "s"}})
    return httpx.Response(status, text=text or "")


@pytest.mark.parametrize(("status", "code", "error"), [
    (400, "instance-operations/launch/insufficient-capacity", InsufficientCapacityError),
    (400, "global/quota-exceeded", QuotaExceededError),
    (401, "global/invalid-api-key", AuthError),
    (403, "global/account-inactive", AuthError),
    (404, "global/object-does-not-exist", InstanceNotFoundError),
    (400, "global/invalid-parameters", InvalidRequestError),
    (429, "global/too-many-requests", RateLimitedError),
    (500, "global/internal-error", ProviderUnavailableError),
    (400, "provider/internal-unavailable", ProviderUnavailableError),
    (403, None, AuthError),
    (429, None, RateLimitedError),
    (503, None, ProviderUnavailableError),
])
def test_translate_error(status: int, code: str | None, error: type) -> None:
    got = translate_error(_resp(status, code, "<html>busy</html>"))
    assert type(got) is error
    if code:
        assert got is not None and got.code == code


def test_translate_error_passes_successes() -> None:
    assert translate_error(httpx.Response(200, json={"data": []})) is None


# -- offers -------------------------------------------------------------------------------------------

def test_offers_are_live_and_per_region_with_capacity(provider: LambdaProvider) -> None:
    offers = provider.offers(GpuRequest(gpus=("H100-80G",), count=8))
    assert sorted(o.region for o in offers) == ["us-east-1", "us-south-1"]
    for o in offers:
        assert (o.instance_type, o.gpu_count, o.vram_gb, o.price_hr) == ("gpu_8x_h100_sxm5", 8, 80, 23.92)
        assert o.source is OfferOrigin.LIVE and o.availability is Availability.AVAILABLE
        assert o.market is Market.ON_DEMAND
        assert o.interconnect is Interconnect.NVLINK and o.vcpus == 208
        # the type's fixed local disk (InstanceTypeSpecs.storage_gib in the Lambda spec), in GB
        [h100] = [t for t in DEFAULT_TYPES if t.name == "gpu_8x_h100_sxm5"]
        assert o.max_disk_gb == pytest.approx(h100.storage_gib * 1.073741824, abs=0.1)


def test_offers_mark_catalog_regions_without_capacity(cloud: tuple[LambdaFake, FakeServer]) -> None:
    catalog = tuple(replace(h100_offer(region), source=OfferOrigin.CATALOG, availability=Availability.UNKNOWN,
                            price_hr=30.0) for region in ("us-west-2", "us-east-1"))
    p = LambdaProvider(fast_settings(f"{cloud[1].url}/api/v1"), catalog=catalog)
    by_region = {o.region: o for o in p.offers(GpuRequest(gpus=("H100-80G",), count=8))}
    assert by_region["us-west-2"].availability is Availability.NOT_AVAILABLE
    assert by_region["us-west-2"].price_hr == 23.92  # the live price replaces the catalog's
    assert by_region["us-east-1"].availability is Availability.AVAILABLE
    p.close()


def test_offers_filter_by_request(provider: LambdaProvider, fake: LambdaFake) -> None:
    assert provider.offers(GpuRequest(gpus=("A100-80G",), count=8)) == []  # that type has no capacity now
    fake.capacity["gpu_8x_a100_80gb_sxm4"] = ("us-west-1",)
    [offer] = provider.offers(GpuRequest(gpus=("A100-80G",), count=8))
    assert offer.region == "us-west-1" and offer.price_hr == 14.32
    assert provider.offers(GpuRequest(gpus=("H100-80G",), count=8, markets=frozenset({Market.SPOT}))) == []
    assert {o.gpu for o in provider.offers(GpuRequest(count=1))} == {"A10-24G", "A100-40G"}


# -- launch -------------------------------------------------------------------------------------------

def test_launch_sends_the_spec_request_and_carries_ids_in_the_name(provider: LambdaProvider,
                                                                   fake: LambdaFake) -> None:
    s = spec(script="#!/bin/sh\necho hi\n")
    inst = provider.launch(s)
    [body] = posts(fake, "/instance-operations/launch")
    assert body == {"region_name": "us-east-1", "instance_type_name": "gpu_8x_h100_sxm5", "ssh_key_names": ["orch"],
                    "file_system_names": [], "name": instance_name(OWNER, s.launch_id),
                    "user_data": "#!/bin/sh\necho hi\n"}
    assert (inst.launch_id, inst.owner, inst.provider) == (s.launch_id, OWNER, "lambda")
    assert inst.state is InstanceState.PENDING and inst.raw_state == "booting" and inst.ssh_user == "ubuntu"


def test_launch_is_idempotent_and_registers_the_key_once(provider: LambdaProvider, fake: LambdaFake) -> None:
    s = spec()
    first = provider.launch(s)
    again = provider.launch(s)
    other = provider.launch(spec())
    assert first.instance_id == again.instance_id != other.instance_id
    assert len(posts(fake, "/instance-operations/launch")) == 2
    assert posts(fake, "/ssh-keys") == [{"name": "orch", "public_key": PUBLIC_KEY}]


def test_launch_after_terminate_makes_a_new_instance(provider: LambdaProvider) -> None:
    s = spec()
    first = provider.launch(s)
    provider.terminate(first.instance_id)
    assert provider.launch(s).instance_id != first.instance_id


def test_a_different_key_under_the_name_gets_its_own_name(provider: LambdaProvider, fake: LambdaFake) -> None:
    fake.ssh_keys.append({"id": "k0", "name": "orch", "public_key": "ssh-ed25519 AAAAOtherMachine me@other"})
    provider.launch(spec())
    provider.launch(spec())
    [added] = posts(fake, "/ssh-keys")
    assert added["name"].startswith("orch-") and added["public_key"] == PUBLIC_KEY
    assert {b["ssh_key_names"][0] for b in posts(fake, "/instance-operations/launch")} == {added["name"]}


def test_a_suffixed_key_name_stays_within_lambdas_64_characters(cloud: tuple[LambdaFake, FakeServer]) -> None:
    """AddSSHKeyRequest.name is 1-64 characters (Lambda OpenAPI 1.8.3): a configured name at that limit, taken by
    another key, still registers this one (the fingerprint suffix replaces its tail), and the launch goes on."""
    fake, server = cloud
    long_name = "k" * 64
    fake.ssh_keys.append({"id": "k0", "name": long_name, "public_key": "ssh-ed25519 AAAAOtherMachine me@other"})
    p = LambdaProvider(fast_settings(f"{server.url}/api/v1").model_copy(update={"ssh_key_name": long_name}),
                       catalog=())
    try:
        p.launch(spec())
    finally:
        p.close()
    [added] = posts(fake, "/ssh-keys")
    assert len(added["name"]) <= 64 and added["name"] != long_name
    assert [b["ssh_key_names"] for b in posts(fake, "/instance-operations/launch")] == [[added["name"]]]


def test_a_key_name_lambda_would_refuse_is_a_settings_error() -> None:
    with pytest.raises(ValueError, match="64"):
        Settings(api_key=SecretStr("k"), ssh_key_name="k" * 65)


def test_a_key_registered_by_another_daemon_meanwhile_is_used(cloud: tuple[LambdaFake, FakeServer]) -> None:
    """Several daemons on one account: each reads the keys (none yet), one adds it first, the others' add is
    refused as a duplicate name; their launch goes on with the key now there, the same one."""
    fake, server = cloud
    plain = server._handle

    def racing(method: str, path: str, body: Any, headers: dict[str, str]) -> Any:
        if (method, path) == ("POST", f"{API}/ssh-keys") and not fake.ssh_keys:
            fake.ssh_keys.append({"id": "k1", "name": "orch", "public_key": PUBLIC_KEY})   # the other daemon's
        return plain(method, path, body, headers)

    server._handle = racing
    p = LambdaProvider(fast_settings(f"{server.url}/api/v1"), catalog=())
    try:
        p.launch(spec())
    finally:
        p.close()
    assert [r.status for r in fake.requests if r.path == f"{API}/ssh-keys" and r.method == "POST"] == [400]
    assert [b["ssh_key_names"] for b in posts(fake, "/instance-operations/launch")] == [["orch"]]


def test_a_different_key_registered_meanwhile_is_still_an_error(cloud: tuple[LambdaFake, FakeServer]) -> None:
    fake, server = cloud
    plain = server._handle

    def racing(method: str, path: str, body: Any, headers: dict[str, str]) -> Any:
        if (method, path) == ("POST", f"{API}/ssh-keys") and not fake.ssh_keys:
            fake.ssh_keys.append({"id": "k1", "name": "orch", "public_key": "ssh-ed25519 AAAAOther me@other"})
        return plain(method, path, body, headers)

    server._handle = racing
    p = LambdaProvider(fast_settings(f"{server.url}/api/v1"), catalog=())
    try:
        with pytest.raises(InvalidRequestError, match="already exists"):
            p.launch(spec())
    finally:
        p.close()
    assert posts(fake, "/instance-operations/launch") == []


def test_same_key_with_another_comment_is_reused(provider: LambdaProvider, fake: LambdaFake) -> None:
    fake.ssh_keys.append({"id": "k0", "name": "orch", "public_key": PUBLIC_KEY.rsplit(" ", 1)[0] + " laptop"})
    provider.launch(spec())
    assert posts(fake, "/ssh-keys") == []


def test_launch_without_any_key_is_refused(provider: LambdaProvider, fake: LambdaFake) -> None:
    with pytest.raises(InvalidRequestError, match="SSH key"):
        provider.launch(spec(key=""))
    assert posts(fake, "/instance-operations/launch") == []


def test_spot_is_refused(provider: LambdaProvider) -> None:
    assert Capability.SPOT not in LambdaProvider.capabilities and Capability.TAGS not in LambdaProvider.capabilities
    with pytest.raises(InvalidRequestError):
        provider.launch(spec(offer=replace(h100_offer(), market=Market.SPOT)))


def test_capacity_in_a_region_without_it(provider: LambdaProvider, fake: LambdaFake) -> None:
    with pytest.raises(InsufficientCapacityError) as info:
        provider.launch(spec(offer=h100_offer("us-west-1")))
    assert info.value.code == "instance-operations/launch/insufficient-capacity"
    assert len(posts(fake, "/instance-operations/launch")) == 1  # raised at once, not retried


# -- get / list / terminate ---------------------------------------------------------------------------

def test_states_and_addresses(provider: LambdaProvider, fake: LambdaFake) -> None:
    inst = provider.launch(spec())
    got = provider.get(inst.instance_id)
    assert got is not None and got.state is InstanceState.RUNNING and got.raw_state == "active"
    assert got.public_ip and got.private_ip and got.price_hr == 23.92 and got.region == "us-east-1"
    fake.instances[inst.instance_id].status = "unhealthy"
    sick = provider.get(inst.instance_id)
    # Failing Lambda's health checks: still listed and billed, may recover; never read as gone.
    assert sick is not None and sick.state is InstanceState.UNREACHABLE and sick.raw_reason == "unhealthy"
    assert not sick.state.is_gone
    provider.terminate(inst.instance_id)
    states = []
    while (cur := provider.get(inst.instance_id)) is not None and len(states) < 5:
        states.append(cur.state)
    assert states == [InstanceState.STOPPING, InstanceState.TERMINATED]


def test_get_missing_is_none(provider: LambdaProvider) -> None:
    assert provider.get("0920582c7ff041399e34823a0be62549") is None


def test_list_instances_by_owner_from_names(provider: LambdaProvider, fake: LambdaFake) -> None:
    mine = provider.launch(spec())
    fake.instances["x1"] = _Inst("x1", "my-handmade-box", fake.types[0], "us-east-1", ["orch"])
    fake.instances["x2"] = _Inst("x2", instance_name("bob", "l0123456789ab"), fake.types[0], "us-east-1", ["orch"])
    assert [i.instance_id for i in provider.list_instances(OWNER)] == [mine.instance_id]
    [bobs] = provider.list_instances("bob")
    assert (bobs.instance_id, bobs.launch_id, bobs.owner) == ("x2", "l0123456789ab", "bob")


def test_a_listing_answered_with_the_same_bytes_is_not_decoded_again(provider: LambdaProvider,
                                                                      fake: LambdaFake) -> None:
    mine = provider.launch(spec())
    fake.instances[mine.instance_id].status = "active"
    first = provider.list_instances(OWNER)
    decoded: list[bytes] = []
    listing = provider._listing
    decode = listing._decode
    listing._decode = lambda body: decoded.append(body) or decode(body)  # type: ignore[method-assign]
    assert provider.list_instances(OWNER) == first and not decoded      # the same bytes: the same machines
    assert provider.list_instances("bob") == [] and not decoded          # the owner is filtered after
    fake.instances[mine.instance_id].status = "unhealthy"
    [now] = provider.list_instances(OWNER)
    assert len(decoded) == 1 and (now.state, now.raw_reason) == (InstanceState.UNREACHABLE, "unhealthy")
    assert first[0].state is InstanceState.RUNNING


@pytest.mark.parametrize(("body", "error"), [(b'{"error": null}', "unexpected answer"),
                                           (b'{"data": [', "non-JSON answer"), (b"", "unexpected answer")])
def test_a_listing_that_is_not_the_envelope_fails(body: bytes, error: str) -> None:
    reply = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    p = LambdaProvider(fast_settings("http://lambda.invalid/api/v1"), transport=reply, catalog=())
    with pytest.raises(ProviderUnavailableError, match=error):
        p.list_instances(OWNER)
    p.close()


def test_terminate_missing_succeeds(provider: LambdaProvider, fake: LambdaFake) -> None:
    provider.terminate("0920582c7ff041399e34823a0be62549")
    assert fake.requests[-1].status == 404


# -- transient failures, slowness, rate limits --------------------------------------------------------

def test_transient_errors_are_retried(provider: LambdaProvider, fake: LambdaFake) -> None:
    fake.faults.arm("server_error", 2)
    assert provider.offers(GpuRequest(gpus=("H100-80G",), count=8))
    assert [r.status for r in fake.requests] == [500, 500, 200]


def test_a_slow_answer_times_out_and_is_retried(cloud: tuple[LambdaFake, FakeServer]) -> None:
    fake, server = cloud
    fake.slow_s = 60.0                 # held until the retry arrives (the fake's ``slow``), never this long
    fake.faults.arm("slow", 1)
    # The timeout is the client's own, in real time: 1 s leaves a loaded machine room for the fake's second,
    # prompt answer (0.1 s did not always), and the slow one waits for the retry, not for a clock.
    p = LambdaProvider(replace_settings(fast_settings(f"{server.url}/api/v1"), timeout_s=1.0), catalog=())
    assert p.offers(GpuRequest(gpus=("H100-80G",), count=8))
    assert len([r for r in fake.requests if r.path == f"{API}/instance-types"]) == 2
    p.close()


def replace_settings(s: Settings, **changes: object) -> Settings:
    return s.model_copy(update=changes)


class FakeClock:
    """A clock that moves only when someone sleeps on it: limiter waits are recorded, never slept."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def _limited(server: FakeServer, clock: FakeClock, launch_interval_s: float) -> LambdaProvider:
    s = replace_settings(fast_settings(f"{server.url}/api/v1"), min_interval_s=1.0, launch_interval_s=launch_interval_s)
    return LambdaProvider(s, clock=clock, sleep=clock.sleep, catalog=())


def test_the_launch_limiter_keeps_launches_under_lambdas_limit() -> None:
    clock = FakeClock()
    fake, server = start_lambda_fake(launch_interval_s=12.0, clock=clock)
    p = _limited(server, clock, launch_interval_s=12.0)
    for _ in range(3):
        p.launch(spec())
    launches = fake.launches()
    assert [r.status for r in launches] == [200, 200, 200]
    assert all(b.at - a.at >= 12.0 for a, b in itertools.pairwise(launches))
    assert max(clock.waits) > 1.0  # the launch limiter, not just the 1 s one, made it wait
    assert all(r.status != 429 for r in fake.requests)
    p.close()
    server.stop()


def test_without_the_launch_limiter_the_fake_answers_429() -> None:
    """The control for the test above: the fake's launch-rate check really bites."""
    clock = FakeClock()
    fake, server = start_lambda_fake(launch_interval_s=12.0, clock=clock)
    p = _limited(server, clock, launch_interval_s=0.0)
    p.launch(spec())
    with pytest.raises(RateLimitedError):
        p.launch(spec())
    assert [r.status for r in fake.launches()][:2] == [200, 429]
    p.close()
    server.stop()


def test_every_call_waits_for_the_general_limiter(cloud: tuple[LambdaFake, FakeServer]) -> None:
    clock = FakeClock()
    p = _limited(cloud[1], clock, launch_interval_s=12.0)
    for _ in range(3):
        p.get("missing")
    assert clock.waits == [1.0, 1.0]
    p.close()


# -- credentials and settings -------------------------------------------------------------------------

def test_wrong_key_is_an_auth_error(cloud: tuple[LambdaFake, FakeServer]) -> None:
    p = LambdaProvider(fast_settings(f"{cloud[1].url}/api/v1", api_key="wrong"), catalog=())
    with pytest.raises(AuthError) as info:
        p.check_credentials()
    assert info.value.code == "global/invalid-api-key" and "wrong" not in str(info.value)
    p.close()


def test_no_key_is_an_auth_error_with_a_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LAMBDA_API_KEY", raising=False)
    monkeypatch.setattr(lambda_settings, "KEY_FILE", tmp_path / "absent")
    p = LambdaProvider(Settings(), catalog=())
    with pytest.raises(AuthError, match="LAMBDA_API_KEY"):
        p.check_credentials()
    p.close()


def test_no_key_found_is_said_so_not_an_invalid_key(cloud: tuple[LambdaFake, FakeServer]) -> None:
    """A call made with no key: "no API key found" and where a key comes from, not the cloud's "API key was
    invalid, expired, or deleted"."""
    p = LambdaProvider(fast_settings(f"{cloud[1].url}/api/v1").model_copy(update={"api_key": None}), catalog=())
    with pytest.raises(AuthError) as info:
        p.list_instances("tester")
    p.close()
    said = str(info.value)
    assert said.startswith("lambda: no API key found (set LAMBDA_API_KEY") and "invalid" not in said


def test_key_from_env_then_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key_file = tmp_path / "lambda_keys"
    key_file.write_text("# keys\napi_key = secret_from_file\n")
    monkeypatch.setattr(lambda_settings, "KEY_FILE", key_file)
    monkeypatch.setenv("LAMBDA_API_KEY", "secret_from_env")
    assert Settings().api_key == SecretStr("secret_from_env")
    monkeypatch.delenv("LAMBDA_API_KEY")
    s = Settings()
    assert s.api_key is not None and s.api_key.get_secret_value() == "secret_from_file"
    assert "secret_from_file" not in repr(s) and "secret_from_file" not in str(s.model_dump())


def test_registry_builds_it(cloud: tuple[LambdaFake, FakeServer]) -> None:
    p = create_provider("lambdalabs", load_settings("lambdalabs", {"api_key": "test-key",
                                                               "base_url": f"{cloud[1].url}/api/v1"}))
    assert isinstance(p, LambdaProvider) and p.name == "lambda"
    p.check_credentials()
    p.close()


def test_fake_rejects_fields_outside_the_spec(cloud: tuple[LambdaFake, FakeServer]) -> None:
    fake, server = cloud
    fake.ssh_keys.append({"id": "k", "name": "orch", "public_key": PUBLIC_KEY})
    body = {"region_name": "us-east-1", "instance_type_name": "gpu_8x_h100_sxm5", "ssh_key_names": ["orch"],
            "quantity": 1, "bogus": base64.b64encode(b"x").decode()}
    r = httpx.post(f"{server.url}/api/v1/instance-operations/launch", json=body,
                   headers={"Authorization": "Bearer test-key"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "global/invalid-parameters"



# -- Lambda's published OpenAPI examples (tests/fakes/schemas/PROVENANCE.md) ------------------------------------

def _lambda_spec() -> dict[str, object]:
    import json

    spec: dict[str, object] = json.loads(
        (Path(__file__).parent / "fakes" / "schemas" / "lambda-cloud-openapi-1.8.3.json").read_text())
    return spec


def test_published_instance_examples_parse() -> None:
    """Lambda Cloud API OpenAPI 1.8.3 (alexandervaneck/lambda-ai-cloud-api-client @
    b6023bc07c0933df459426b281c113844f2571f5, openapi-1.8.3.json): components.schemas.Instance property examples,
    and every InstanceStatus enum value."""
    from providers.lambdalabs.instances import to_instance

    schemas = _lambda_spec()["components"]["schemas"]  # type: ignore[index]
    props = schemas["Instance"]["properties"]
    raw = {k: v["examples"][0] for k, v in props.items() if "examples" in v}
    raw.update(status="active", region={"name": "us-west-1", "description": "California, USA"},
               instance_type=schemas["InstanceTypes"]["example"]["gpu_1x_gh200"]["instance_type"])
    inst = to_instance(raw)
    assert inst.instance_id == "0920582c7ff041399e34823a0be62549" and inst.state is InstanceState.RUNNING
    assert (inst.public_ip, inst.private_ip) == ("198.51.100.2", "10.0.2.100")
    assert inst.instance_type == "gpu_1x_gh200" and inst.price_hr == 1.49 and inst.region == "us-west-1"
    assert ("hostname", "headnode1") in inst.extra and inst.owner is None   # "My Instance": not orch's name
    mapped = {s: to_instance({**raw, "status": s}).state for s in schemas["InstanceStatus"]["enum"]}
    assert mapped == {"booting": InstanceState.PENDING, "active": InstanceState.RUNNING,
                      "unhealthy": InstanceState.UNREACHABLE, "terminated": InstanceState.TERMINATED,
                      "terminating": InstanceState.STOPPING, "preempted": InstanceState.PREEMPTED}


def test_published_instance_types_example_parses() -> None:
    """Same spec: components.schemas.InstanceTypes example (what GET /instance-types answers)."""
    from datetime import date

    from providers.lambdalabs.offers import to_offer

    example = _lambda_spec()["components"]["schemas"]["InstanceTypes"]["example"]  # type: ignore[index]
    itype = example["gpu_1x_gh200"]["instance_type"]
    # The only published example is a GH200 (96 GB): the registry knows it, so the offer is kept (issue 27).
    gh200 = to_offer(itype, "us-west-1", date(2026, 1, 1))
    assert gh200 is not None and (gh200.gpu, gh200.vram_gb, gh200.gpu_count) == ("GH200-96G", 96.0, 1)
    # Its fields (specs.gpus/vcpus/memory_gib, price_cents_per_hour) are the ones to_offer reads, with their types:
    known = {**itype, "description": "1x H100 (80 GB SXM5)", "gpu_description": "H100 (80 GB SXM5)"}
    offer = to_offer(known, "us-west-1", date(2026, 1, 1))
    assert offer is not None and (offer.gpu_count, offer.vcpus, offer.memory_gb, offer.price_hr) == (1, 64, 432, 1.49)
