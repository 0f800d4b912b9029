"""VastProvider against the Vast fake: filters, prices, bids, outbid, failed-bid cleanup, errors."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest

from providers.base import (
    Availability,
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
    PriceTooLowError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)
from providers.vastai.adapter import VastProvider
from providers.vastai.create import ONSTART_MAX
from providers.vastai.errors import translate_error
from providers.vastai.instances import map_state
from providers.vastai.offers import offer_price_hr
from providers.vastai.settings import Settings
from tests.contract.harness_vastai import fast_settings
from tests.fakes.vast import VastFake, seed_offers

OWNER = "tester"
SEED = {o["id"]: o for o in seed_offers()}
RTX_1X, RTX_2X, RTX_UNRELIABLE, RTX_UNVERIFIED, RTX_NO_PORTS = 7001001, 7001002, 7001003, 7001004, 7001005
A100_1X, H100_1X, H100_RENTED = 7002001, 7003001, 7003003


@pytest.fixture(scope="module")
def fake() -> Iterator[VastFake]:
    f = VastFake()
    f.start()
    yield f
    f.stop()


@pytest.fixture
def url(fake: VastFake) -> Iterator[str]:
    fake.reset()
    assert fake._server is not None
    yield f"http://127.0.0.1:{fake._server.server_address[1]}/api/v0"
    fake.reset()


@pytest.fixture
def vast(url: str) -> Iterator[VastProvider]:
    p = VastProvider(fast_settings(url))
    yield p
    p.close()


def spec_for(ask_id: int | None, market: Market = Market.ON_DEMAND, *, gpu: str = "RTX4090-24G",
             max_price: float | None = None, script: str = "echo hi", key: str = "") -> LaunchSpec:
    offer = Offer(provider="vastai", instance_type="t", region="r", zone=None, gpu=gpu, gpu_count=1, vram_gb=24,
                  vcpus=8, memory_gb=32, interconnect=Interconnect.PCIE, market=market, price_hr=1.0,
                  price_as_of=date.today(), source=OfferOrigin.LIVE if ask_id else OfferOrigin.CATALOG,
                  availability=Availability.AVAILABLE if ask_id else Availability.UNKNOWN,
                  offer_id=str(ask_id) if ask_id else None)
    return LaunchSpec(launch_id=new_launch_id(), owner=OWNER, job="j", offer=offer, startup_script=script,
                      ssh_public_key=key, disk_gb=40, max_price_hr=max_price)


def bodies(fake: VastFake, method: str, fragment: str) -> list[Any]:
    return [r.body for r in fake.requests if r.method == method and fragment in r.path]


# ---- offers -------------------------------------------------------------------------------------------------

def test_search_sends_the_careful_filters_and_the_server_applies_them(fake: VastFake, vast: VastProvider) -> None:
    offers = vast.offers(GpuRequest(gpus=("RTX4090-24G",), count=1, markets=frozenset({Market.ON_DEMAND})))
    (body,) = bodies(fake, "POST", "/bundles")
    assert body["verified"] == {"eq": True} and body["rentable"] == {"eq": True} and body["rented"] == {"eq": False}
    assert body["reliability"] == {"gte": 0.98}
    assert body["direct_port_count"] == {"gte": 1}
    assert body["cuda_max_good"] == {"gte": 12.1}
    assert body["inet_down"] == {"gte": 200.0}
    assert body["num_gpus"] == {"eq": 1}
    assert body["gpu_name"] == {"in": ["RTX 4090"]}
    assert body["type"] == "on-demand"
    # the unreliable, unverified and port-less 4090s were dropped by those filters; the 2x by the count
    assert [o.offer_id for o in offers] == [str(RTX_1X)]
    assert all(o.source is OfferOrigin.LIVE and o.availability is Availability.AVAILABLE for o in offers)


def test_looser_filters_bring_back_what_the_defaults_drop(url: str) -> None:
    req = GpuRequest(gpus=("RTX4090-24G",), count=1, markets=frozenset({Market.ON_DEMAND}))
    loose = VastProvider(fast_settings(url, min_reliability=0.5, verified=None, min_direct_ports=0))
    only_unverified = VastProvider(fast_settings(url, verified=False, min_direct_ports=0))
    try:
        ids = {o.offer_id for o in loose.offers(req)}
        unverified = {o.offer_id for o in only_unverified.offers(req)}
    finally:
        loose.close()
        only_unverified.close()
    assert ids == {str(i) for i in (RTX_1X, RTX_UNRELIABLE, RTX_UNVERIFIED, RTX_NO_PORTS)}
    assert unverified == {str(RTX_UNVERIFIED)}


def test_old_cuda_and_rented_machines_are_not_offered(vast: VastProvider) -> None:
    a100 = vast.offers(GpuRequest(gpus=("A100-80G",), count=1))
    h100 = vast.offers(GpuRequest(gpus=("H100-80G",), count=1))
    assert {o.offer_id for o in a100} == {str(A100_1X)}       # 7002003 has cuda_max_good 11.8
    assert str(H100_RENTED) not in {o.offer_id for o in h100}


def test_price_is_base_plus_disk_per_hour_as_the_cli_computes(vast: VastProvider) -> None:
    offers = vast.offers(GpuRequest(gpus=("A100-80G",), count=1))
    by_market = {o.market: o for o in offers}
    ask = SEED[A100_1X]
    disk_hr = vast.settings.disk_gb * ask["storage_cost"] / 720
    assert by_market[Market.ON_DEMAND].price_hr == pytest.approx(ask["dph_base"] + disk_hr)
    # spot: the bid a launch places (min_bid x bid_markup), which is what Vast bills, not the ask's floor
    assert by_market[Market.SPOT].price_hr == pytest.approx(round(ask["min_bid"] * vast.settings.bid_markup, 4)
                                                             + disk_hr)
    assert by_market[Market.SPOT].price_hr < by_market[Market.ON_DEMAND].price_hr
    assert offer_price_hr(ask, Market.ON_DEMAND, 0, bid_markup=1.1) == pytest.approx(ask["dph_base"])


def test_offers_resolve_gpus_and_shapes(vast: VastProvider) -> None:
    (h100x8,) = [o for o in vast.offers(GpuRequest(count=8, markets=frozenset({Market.ON_DEMAND})))]
    assert h100x8.gpu == "H100-80G" and h100x8.gpu_count == 8
    assert h100x8.interconnect is Interconnect.NVLINK
    assert h100x8.region == "Finland, FI"
    (a100,) = vast.offers(GpuRequest(gpus=("A100-80G",), count=1, markets=frozenset({Market.ON_DEMAND})))
    assert a100.vram_gb == pytest.approx(80.0)


def test_offers_for_another_provider_are_empty(fake: VastFake, vast: VastProvider) -> None:
    assert vast.offers(GpuRequest(providers=("aws",))) == []
    assert bodies(fake, "POST", "/bundles") == []


# ---- launch -------------------------------------------------------------------------------------------------

def test_launch_labels_the_instance_and_sends_an_on_demand_create(fake: VastFake, vast: VastProvider) -> None:
    spec = spec_for(RTX_1X, key="ssh-ed25519 AAAAkey me@host")
    inst = vast.launch(spec)
    (body,) = bodies(fake, "PUT", "/asks/")
    assert body["label"] == instance_name(OWNER, spec.launch_id)
    assert body["price"] is None and body["client_id"] == "me" and body["runtype"] == "ssh"
    assert body["env"] == {"-p 10022:10022": "1", "ORCH_BOOT_B64": base64.b64encode(b"echo hi").decode()}
    assert body["disk"] == 40
    assert "ssh-ed25519 AAAAkey me@host" in body["onstart"]
    assert body["onstart"].endswith("sh /root/orch-boot.sh > /root/orch-boot.log 2>&1")
    assert inst.launch_id == spec.launch_id and inst.owner == OWNER and inst.market is Market.ON_DEMAND


def test_interruptible_bids_min_bid_times_markup(fake: VastFake, vast: VastProvider) -> None:
    inst = vast.launch(spec_for(A100_1X, Market.SPOT))
    (body,) = bodies(fake, "PUT", "/asks/")
    assert body["price"] == pytest.approx(round(SEED[A100_1X]["min_bid"] * vast.settings.bid_markup, 4))
    assert inst.market is Market.SPOT


def test_a_spot_launch_is_billed_the_price_its_quote_showed(fake: VastFake, vast: VastProvider) -> None:
    """Vast bills an interruptible at the bid its renter set (PUT /api/v0/asks/{id} ``price``: "Bid price per
    machine (in $/hour)", shared/reference/specs/vastai-openapi.yaml; docs.vast.ai rental types: "you set a bid
    price"). The quote, the bid sent and the instance's reported dph_total (what spend accrues) must agree."""
    (quote,) = vast.offers(GpuRequest(gpus=("A100-80G",), count=1, markets=frozenset({Market.SPOT})))
    spec = LaunchSpec(launch_id=new_launch_id(), owner=OWNER, job="j", offer=quote, startup_script="echo hi",
                      disk_gb=vast.settings.disk_gb)
    inst = vast.launch(spec)
    (body,) = bodies(fake, "PUT", "/asks/")
    disk_hr = vast.settings.disk_gb * SEED[A100_1X]["storage_cost"] / 720
    assert body["price"] + disk_hr == pytest.approx(quote.price_hr, abs=1e-6)
    assert inst.price_hr == pytest.approx(quote.price_hr, abs=1e-6)


@pytest.mark.parametrize("market", [Market.ON_DEMAND, Market.SPOT])
def test_offers_are_priced_with_the_disk_the_job_will_rent(fake: VastFake, vast: VastProvider, market: Market) -> None:
    """Vast bills the disk by the hour (storage_cost $/GB/month): a job asking 500 GB is quoted with 500 GB, not
    the adapter's default, and its launch is billed what it was quoted."""
    req = GpuRequest(gpus=("A100-80G",), count=1, markets=frozenset({market}), disk_gb=500)
    (quote,) = vast.offers(req)
    (default,) = vast.offers(GpuRequest(gpus=("A100-80G",), count=1, markets=frozenset({market})))
    assert quote.price_hr - default.price_hr == pytest.approx(400 * SEED[A100_1X]["storage_cost"] / 720, abs=1e-6)
    inst = vast.launch(LaunchSpec(launch_id=new_launch_id(), owner=OWNER, job="j", offer=quote, disk_gb=500))
    assert inst.price_hr == pytest.approx(quote.price_hr, abs=1e-6)


def test_a_max_price_caps_the_bid_and_never_raises_it(fake: VastFake, vast: VastProvider) -> None:
    """A cap above the bid leaves the bid at the quoted min_bid x markup: bidding the cap would bill the cap."""
    inst = vast.launch(spec_for(A100_1X, Market.SPOT, max_price=5.0))
    (body,) = bodies(fake, "PUT", "/asks/")
    assert body["price"] == pytest.approx(round(SEED[A100_1X]["min_bid"] * vast.settings.bid_markup, 4))
    assert inst.price_hr is not None and inst.price_hr < 1.0


def test_a_max_price_under_the_bid_is_refused_before_any_create(fake: VastFake, vast: VastProvider) -> None:
    bid = round(SEED[A100_1X]["min_bid"] * vast.settings.bid_markup, 4)
    with pytest.raises(PriceTooLowError) as err:
        vast.launch(spec_for(A100_1X, Market.SPOT, max_price=bid))      # the bid fits, the bid plus disk does not
    assert err.value.code == "max_price_below_bid"
    assert bodies(fake, "PUT", "/asks/") == [] and fake.state.instances == {}


def test_relaunch_finds_the_instance_by_label(fake: VastFake, vast: VastProvider) -> None:
    spec = spec_for(RTX_1X)
    first, second = vast.launch(spec), vast.launch(spec)
    assert first.instance_id == second.instance_id
    assert len(bodies(fake, "PUT", "/asks/")) == 1


def test_a_create_whose_answer_was_lost_is_found_not_repeated(fake: VastFake, vast: VastProvider) -> None:
    fake.inject("lost-answer", 1)
    spec = spec_for(RTX_1X)
    inst = vast.launch(spec)
    assert len(bodies(fake, "PUT", "/asks/")) == 1
    assert [i.instance_id for i in vast.list_instances(OWNER)] == [inst.instance_id]


def test_a_catalog_offer_is_matched_to_a_live_ask(fake: VastFake, vast: VastProvider) -> None:
    """At no more than it was quoted at (tests/test_vast_quote.py): the H100 ask bills $2.12/h with 100 GB."""
    spec = spec_for(None, gpu="H100-80G")
    inst = vast.launch(replace(spec, offer=replace(spec.offer, price_hr=2.13)))
    assert [r.path for r in fake.requests if r.method == "PUT"] == [f"/api/v0/asks/{H100_1X}"]
    assert inst.state in (InstanceState.PENDING, InstanceState.RUNNING)


def test_an_asks_disk_space_is_its_offers_disk_limit_and_a_launch_needs_room(fake: VastFake,
                                                                          vast: VastProvider) -> None:
    """disk_space: "Disk storage space in GB" (search filters, shared/reference/specs/vastai-openapi.yaml)."""
    (h100,) = vast.offers(GpuRequest(gpus=("H100-80G",), count=1, markets=frozenset({Market.ON_DEMAND})))
    assert h100.max_disk_gb == SEED[H100_1X]["disk_space"]
    with fake.lock:
        fake.state.offers[H100_1X]["disk_space"] = 30.0          # less than the spec's 40 GB
    with pytest.raises(InsufficientCapacityError):
        vast.launch(spec_for(None, gpu="H100-80G"))               # the catalog offer's only live ask is too small
    with pytest.raises(InsufficientCapacityError):
        vast.launch(spec_for(H100_1X, gpu="H100-80G"))            # and named by id, the search refuses it too
    assert bodies(fake, "PUT", "/asks/") == []


def test_a_gone_ask_is_insufficient_capacity_without_a_create(fake: VastFake, vast: VastProvider) -> None:
    with pytest.raises(InsufficientCapacityError):
        vast.launch(spec_for(H100_RENTED))
    assert bodies(fake, "PUT", "/asks/") == []


def test_a_long_boot_script_rides_in_env_and_onstart_stays_short(fake: VastFake, vast: VastProvider) -> None:
    """Vast's onstart takes 4,048 characters: the script goes in ``env``; onstart only decodes and runs it."""
    script = "#!/bin/sh\necho " + "x" * (4 * ONSTART_MAX) + "\n"
    vast.launch(spec_for(RTX_1X, script=script))
    (body,) = bodies(fake, "PUT", "/asks/")
    assert len(body["onstart"]) < 600 < ONSTART_MAX
    assert base64.b64decode(body["env"]["ORCH_BOOT_B64"]).decode() == script
    assert "bash" not in body["onstart"] and "gunzip" not in body["onstart"]


# ---- outbid and failed bids ---------------------------------------------------------------------------------

def test_outbid_reads_as_preempted_and_a_winning_rebid_resumes(fake: VastFake, vast: VastProvider) -> None:
    inst = vast.launch(spec_for(A100_1X, Market.SPOT))
    fake.outbid(inst.instance_id)
    got = vast.get(inst.instance_id)
    assert got is not None and got.state is InstanceState.PREEMPTED
    assert got.raw_reason == "outbid" and got.raw_state == "stopped" and got.market is Market.SPOT
    vast.change_bid(inst.instance_id, SEED[A100_1X]["min_bid"] * 2)
    again = vast.get(inst.instance_id)
    assert again is not None and again.state in (InstanceState.PENDING, InstanceState.RUNNING)


def test_refused_low_bid_destroys_the_stopped_leftover(fake: VastFake, vast: VastProvider) -> None:
    fake.state.low_bid_creates_stopped = True
    fake.state.min_bid_rises[A100_1X] = 0.9             # another renter raised the floor after our search
    spec = spec_for(A100_1X, Market.SPOT)
    with pytest.raises(PriceTooLowError):
        vast.launch(spec)
    assert len(bodies(fake, "PUT", "/asks/")) == 1
    assert [r.path for r in fake.requests if r.method == "DELETE"] == ["/api/v0/instances/31000001"]
    assert fake.state.instances == {}
    assert vast.list_instances(OWNER) == []


def test_an_onstart_over_vast_s_limit_is_refused_typed(fake: VastFake, vast: VastProvider) -> None:
    import os

    # The boot script rides in env, so an incompressible one still launches with a short onstart...
    vast.launch(spec_for(A100_1X, script="echo " + os.urandom(6000).hex()))
    assert len(bodies(fake, "PUT", "/asks/")[0]["onstart"]) < 4048
    # ...and an onstart over the limit (here an absurd ssh key) is refused typed before any create.
    before = dict(fake.state.instances)
    with pytest.raises(InvalidRequestError) as err:
        vast.launch(spec_for(RTX_1X, key="ssh-rsa " + "A" * 5000))
    assert "4048" in err.value.message
    assert fake.state.instances == before


def test_a_spot_create_always_carries_a_bid(fake: VastFake, vast: VastProvider) -> None:
    inst = vast.launch(spec_for(A100_1X, Market.SPOT))      # no max price: the bid is min_bid x markup
    [body] = bodies(fake, "PUT", "/asks/")
    assert isinstance(body["price"], float) and body["price"] >= fake.state.offers[A100_1X]["min_bid"]
    assert inst.market is Market.SPOT


def test_a_spot_create_that_rents_on_demand_is_destroyed_and_typed(fake: VastFake, vast: VastProvider) -> None:
    fake.state.bid_ignored = True       # Vast took the create but made an on-demand rental
    with pytest.raises(InsufficientCapacityError) as err:
        vast.launch(spec_for(A100_1X, Market.SPOT))
    assert err.value.code == "wrong_rental_type"
    assert [r.path for r in fake.requests if r.method == "DELETE"] == ["/api/v0/instances/31000001"]
    assert fake.state.instances == {}


def test_refused_low_bid_without_a_leftover_is_price_too_low(fake: VastFake, vast: VastProvider) -> None:
    fake.state.min_bid_rises[A100_1X] = 0.9
    with pytest.raises(PriceTooLowError) as err:
        vast.launch(spec_for(A100_1X, Market.SPOT))
    assert err.value.code == "invalid_price"
    assert fake.state.instances == {}


def test_helper_destroys_stopped_interruptibles(fake: VastFake, vast: VastProvider) -> None:
    spot = vast.launch(spec_for(A100_1X, Market.SPOT))
    kept = vast.launch(spec_for(RTX_1X))
    fake.outbid(spot.instance_id)
    assert vast.destroy_stopped_after_failed_bid(OWNER) == [spot.instance_id]
    assert vast.get(spot.instance_id) is None
    assert vast.get(kept.instance_id) is not None


# ---- reading, listing, ending -------------------------------------------------------------------------------

def test_instance_goes_running_with_a_direct_ssh_endpoint(fake: VastFake, vast: VastProvider) -> None:
    fake.state.ssh_endpoint = ("127.0.0.1", 2222)
    inst = vast.launch(spec_for(RTX_1X))
    got = vast.get(inst.instance_id)
    assert got is not None and got.state is InstanceState.RUNNING
    assert (got.public_ip, got.ssh_port, got.ssh_user) == ("127.0.0.1", 2222, "root")


def test_user_stop_reads_stopped(vast: VastProvider) -> None:
    inst = vast.launch(spec_for(RTX_1X))
    vast.stop(inst.instance_id)
    got = vast.get(inst.instance_id)
    assert got is not None and got.state is InstanceState.STOPPED and got.raw_reason is None


def test_list_pages_through_every_instance_and_filters_by_owner(fake: VastFake, vast: VastProvider) -> None:
    offer = SEED[RTX_1X]
    for n in range(30):
        owner = OWNER if n % 3 else "other"
        fake._new_instance(dict(offer), {"image": "x", "label": instance_name(owner, f"l{n:012x}")}, None,
                           stopped=False)
    fake._new_instance(dict(offer), {"image": "x", "label": "somebody's box"}, None, stopped=False)
    mine = vast.list_instances(OWNER)
    assert len(mine) == 20 and all(i.owner == OWNER for i in mine)
    pages = [r for r in fake.requests if r.path == "/api/v1/instances"]
    assert len(pages) == 2 and "after_token" in pages[1].query


def test_missing_instances(vast: VastProvider) -> None:
    assert vast.get("424242") is None
    assert vast.get("not-a-vast-id") is None
    vast.terminate("424242")
    vast.terminate("not-a-vast-id")


def test_slow_answers_time_out_as_unavailable(fake: VastFake, url: str) -> None:
    fake.slow(120)          # every answer held until slow(0): the client's timeout is the only way out
    p = VastProvider(fast_settings(url, timeout_s=0.05, retry_attempts=2))
    try:
        with pytest.raises(ProviderUnavailableError):
            p.offers(GpuRequest(count=1))
    finally:
        p.close()
        fake.slow(0)


def test_bad_key_is_auth_error_with_a_hint(url: str) -> None:
    p = VastProvider(fast_settings(url, api_key="nope"))
    try:
        with pytest.raises(AuthError) as err:
            p.check_credentials()
        with pytest.raises(AuthError):
            p.offers(GpuRequest(count=1))     # the search route says 404 "Invalid user key"
    finally:
        p.close()
    assert "VAST_API_KEY" in str(err.value) and "nope" not in str(err.value)


def test_no_key_found_is_said_so_not_a_refused_key(url: str, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """With no key anywhere a call goes out without one: the cloud's 401 is "no API key found" and where a key
    comes from, not "API key refused" (there was none to refuse)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    p = VastProvider(fast_settings(url, api_key=None))
    try:
        with pytest.raises(AuthError) as err:
            p.list_instances("tester")
    finally:
        p.close()
    said = str(err.value)
    assert said.startswith("vastai: no API key found (set VAST_API_KEY") and "refused" not in said


# ---- status mapping -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("raw", "state", "reason"),
    [
        ({"actual_status": None, "intended_status": "running"}, InstanceState.PENDING, None),
        ({"actual_status": "loading", "intended_status": "running"}, InstanceState.PENDING, None),
        ({"actual_status": "created", "intended_status": "running"}, InstanceState.PENDING, None),
        ({"actual_status": "running", "intended_status": "running"}, InstanceState.RUNNING, None),
        ({"actual_status": "running", "intended_status": "stopped"}, InstanceState.STOPPING, None),
        ({"actual_status": "stopped", "intended_status": "stopped", "cur_state": "stopped",
          "next_state": "stopped", "is_bid": True}, InstanceState.PREEMPTED, "outbid"),
        ({"actual_status": None, "intended_status": "stopped", "cur_state": "stopped", "next_state": "stopped",
          "is_bid": True}, InstanceState.PREEMPTED, "outbid"),
        ({"actual_status": "stopped", "intended_status": "running", "is_bid": False}, InstanceState.PREEMPTED,
         "stopped by host (intended running)"),
        ({"actual_status": "stopped", "intended_status": "stopped", "is_bid": False}, InstanceState.STOPPED, None),
        ({"actual_status": "exited", "intended_status": "running"}, InstanceState.PREEMPTED,
         "exited: will not reach running again"),
        # docs.vast.ai "show instance": unknown = "No recent heartbeat from the host", offline = "Host machine
        # disconnected from Vast servers". Not gone, may come back: UNREACHABLE, never PREEMPTED at once.
        ({"actual_status": "offline", "intended_status": "running"}, InstanceState.UNREACHABLE,
         "offline: host lost contact"),
        ({"actual_status": "unknown", "intended_status": "running"}, InstanceState.UNREACHABLE,
         "unknown: host lost contact"),
        ({"actual_status": "unknown", "intended_status": "running", "status_msg": "no heartbeat"},
         InstanceState.UNREACHABLE, "no heartbeat"),
        ({"actual_status": "frozen", "intended_status": "running"}, InstanceState.STOPPED, None),
    ],
)
def test_status_mapping(raw: dict[str, Any], state: InstanceState, reason: str | None) -> None:
    got_state, raw_state, got_reason = map_state(raw)
    assert (got_state, got_reason) == (state, reason)
    assert raw_state == str(raw.get("actual_status") or raw.get("cur_state") or "null")


# ---- translate_error ----------------------------------------------------------------------------------------

def _response(status: int, body: Any) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (404, {"success": False, "error": "no_such_instance", "msg": "Instance with that ID does not exist."},
         InstanceNotFoundError),
        (404, {"success": False, "error": "not_found", "msg": "Instance not found"}, InstanceNotFoundError),
        (403, {"success": False, "error": "insufficient_credit", "msg": "Your account lacks credit"},
         QuotaExceededError),
        (411, {"success": False, "msg": "Insufficient credit"}, QuotaExceededError),
        (404, {"success": False, "error": "invalid_args",
               "msg": "error 404/3603: no_such_ask Instance type by id 1 is not available."},
         InsufficientCapacityError),
        (410, {"success": False, "error": "no_such_ask", "msg": "no longer available"}, InsufficientCapacityError),
        (400, {"success": False, "error": "invalid_price", "msg": "bid below minimum"}, PriceTooLowError),
        (200, {"success": False, "error": "invalid_price", "msg": "bid below minimum"}, PriceTooLowError),
        (401, {"success": False, "error": "auth_error", "msg": "Invalid user key"}, AuthError),
        (404, {"error": "auth_error", "msg": "Invalid user key"}, AuthError),
        (403, {"success": False, "error": "invalid_args", "msg": "Offer 1 is not your own."}, AuthError),
        (429, {"detail": "API requests too frequent endpoint threshold=4.5"}, RateLimitedError),
        (503, {"success": False, "error": "server_error"}, ProviderUnavailableError),
        (502, "bad gateway", ProviderUnavailableError),
        (400, {"success": False, "error": "invalid_args", "msg": "'image' is required"}, InvalidRequestError),
    ],
)
def test_translate_error(status: int, body: Any, error: type) -> None:
    got = translate_error(_response(status, body))
    assert type(got) is error
    assert got.provider == "vastai"


def test_translate_error_passes_successes() -> None:
    assert translate_error(_response(200, {"success": True, "new_contract": 1})) is None
    assert translate_error(_response(200, {"offers": []})) is None
    assert translate_error(httpx.Response(200)) is None


# ---- settings -----------------------------------------------------------------------------------------------

def test_key_from_env_then_the_cli_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    assert Settings().api_key is None
    legacy = tmp_path / ".vast_api_key"
    legacy.write_text("legacy-key\n")
    assert Settings().api_key is not None and Settings().api_key.get_secret_value() == "legacy-key"
    current = Path(str(tmp_path / "xdg-config")) / "vastai" / "vast_api_key"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    current.parent.mkdir(parents=True)
    current.write_text("cli-key")
    assert Settings().api_key.get_secret_value() == "cli-key"    # type: ignore[union-attr]
    monkeypatch.setenv("VAST_API_KEY", "env-key")
    s = Settings()
    assert s.api_key.get_secret_value() == "env-key"             # type: ignore[union-attr]
    assert "env-key" not in repr(s) and "env-key" not in str(s.model_dump())


# ---- Vast's published field examples (tests/fixtures/vastai/PROVENANCE.md) ---------------------------------------

def test_published_instance_example_parses() -> None:
    """vast-ai/docs @ e758d3501e4308439edcf55424a4360b8c039d1b, api-reference/openapi.yaml,
    components.schemas.Instance: the example value of each field the adapter reads."""
    from providers.vastai.instances import parse_instance

    raw = json.loads((Path(__file__).parent / "fixtures" / "vastai" / "instance_examples.json").read_text())["instance"]
    inst = parse_instance(raw)
    assert inst.instance_id == "883" and inst.state is InstanceState.RUNNING and inst.raw_state == "running"
    assert inst.region == "Washington, US" and inst.market is Market.ON_DEMAND and inst.price_hr == raw["dph_total"]
    assert inst.instance_type == "1x-RTX_A5000-4-128576" and inst.created_at is not None
    # The example's `ports` is a list (not the "22/tcp" mapping a running instance shows): use Vast's ssh proxy.
    assert (inst.public_ip, inst.ssh_port) == ("ssh2281.vast.ai", 10882)
    assert inst.launch_id is None, "label null: not orch's"
    lost = parse_instance({**raw, "actual_status": "offline"})
    assert lost.state is InstanceState.UNREACHABLE and not lost.state.is_gone


@pytest.mark.parametrize("market", [Market.ON_DEMAND, Market.SPOT])
def test_a_job_naming_no_disk_rents_the_disk_its_offers_were_priced_with(fake: VastFake, url: str,
                                                                          market: Market) -> None:
    """vastai.disk_gb prices the offers of a job that names no resources.disk_gb; the launch rents that disk too
    (it rented 100 GB while the quote priced the setting's), so the machine is billed what it was quoted."""
    p = VastProvider(fast_settings(url, disk_gb=300))
    try:
        (quote,) = p.offers(GpuRequest(gpus=("A100-80G",), count=1, markets=frozenset({market})))
        inst = p.launch(LaunchSpec(launch_id=new_launch_id(), owner=OWNER, job="j", offer=quote))
    finally:
        p.close()
    (body,) = bodies(fake, "PUT", "/asks/")
    assert body["disk"] == 300
    assert inst.price_hr == pytest.approx(quote.price_hr, abs=1e-6)
