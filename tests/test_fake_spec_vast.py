"""The Vast fake is held to Vast's own contract: tests/fakes/schemas/vast_fields.json, derived (facts only)
from vast-ai/docs @ e758d350 api-reference/openapi.yaml by scripts/derive_vast_fields.py.

Every exchange the fake answers while the real adapter and raw calls drive it through every route and
every failure mode is checked: the route is in the spec, the status is one the spec lists for it (or one
the schema names as undocumented, with why), and the body validates against that status's schema.
The requests our adapter sends are validated against the request schemas too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from providers.base import Availability, GpuRequest, Interconnect, LaunchSpec, Market, Offer, OfferOrigin, new_launch_id
from providers.errors import ProviderError
from providers.vastai.adapter import VastProvider
from tests.contract.harness_vastai import fast_settings
from tests.fakes.vast import DEFAULT_API_KEY, SPEC_ROUTES, VastFake, seed_offers, spec_route

SCHEMA = json.loads((Path(__file__).parent / "fakes" / "schemas" / "vast_fields.json").read_text())
DEFS = SCHEMA["$defs"]
ROUTES = {(r["method"], r["path"]): r for r in SCHEMA["routes"]}


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator({**schema, "$defs": DEFS})


@dataclass
class Exchange:
    method: str
    path: str
    body: Any
    status: int
    answer: Any


@pytest.fixture
def fake() -> Iterator[tuple[VastFake, str, list[Exchange]]]:
    f = VastFake()
    seen: list[Exchange] = []
    handle = f.handle

    def recording(method: str, raw_path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        status, answer = handle(method, raw_path, headers, body)
        seen.append(Exchange(method, raw_path, body, status, answer))
        return status, answer

    f.handle = recording  # type: ignore[method-assign]
    url = f.start()
    yield f, url, seen
    f.stop()


def _spec(ask_id: int, market: Market, launch_id: str, max_price: float | None = None) -> LaunchSpec:
    offer = Offer(provider="vastai", instance_type="x", region="r", zone=None, gpu="RTX4090-24G", gpu_count=1,
                  vram_gb=24, vcpus=16, memory_gb=64, interconnect=Interconnect.PCIE, market=market, price_hr=0.4,
                  price_as_of=date.today(), source=OfferOrigin.LIVE, availability=Availability.AVAILABLE,
                  offer_id=str(ask_id))
    return LaunchSpec(launch_id=launch_id, owner="spec", job="j", offer=offer, startup_script="echo hi",
                      ssh_public_key="ssh-ed25519 AAAA test", disk_gb=40, max_price_hr=max_price)


def _drive(f: VastFake, url: str) -> None:
    """Walk every route through its successes and failures."""
    p = VastProvider(fast_settings(url))
    bad = VastProvider(fast_settings(url, api_key="wrong-key"))
    raw = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {DEFAULT_API_KEY}"})
    v1 = url.removesuffix("/api/v0") + "/api/v1"
    try:
        p.offers(GpuRequest(gpus=("RTX4090-24G",), count=1))
        p.offers(GpuRequest(count=8, min_vram_gb=80))
        inst = p.launch(_spec(7001001, Market.ON_DEMAND, new_launch_id()))
        p.get(inst.instance_id)
        p.get(inst.instance_id)
        p.stop(inst.instance_id)
        raw.put(f"/instances/{inst.instance_id}/", json={"state": "running", "label": "relabelled"})
        raw.put(f"/instances/{inst.instance_id}/", json={})                       # 400
        spot = p.launch(_spec(7002001, Market.SPOT, new_launch_id()))
        f.outbid(spot.instance_id)
        p.get(spot.instance_id)
        p.change_bid(spot.instance_id, 0.9)
        raw.put(f"/instances/bid_price/{spot.instance_id}/", json={"client_id": "me", "price": 0})   # 400
        raw.put("/instances/bid_price/424242/", json={"client_id": "me", "price": 1.0})              # 404
        raw.put("/instances/424242/", json={"state": "stopped"})                                     # 404
        for fault in VastFake.FAULTS:
            f.inject(fault, 1)
            ask = 7003002 if fault == "lost-answer" else 7001002     # lost-answer really rents its ask
            raw.put(f"/asks/{ask}/", json={"client_id": "me", "image": "x"})
        raw.put("/asks/7001002/", json={"client_id": "me", "label": "no-image"})                     # 400
        raw.put("/asks/7001002/", json={"client_id": "me", "image": "x", "price": 500})             # 400
        raw.put("/asks/1/", json={"client_id": "me", "image": "x"})                                  # 404
        raw.put("/asks/7001002/", json={"client_id": "me", "image": "x", "price": 0.01})            # 400 low bid
        f.state.low_bid_creates_stopped = True
        raw.put("/asks/7001002/", json={"client_id": "me", "image": "x", "price": 0.01, "label": "l"})  # 200 false
        raw.post("/bundles/", json={"nonsense_field": {"eq": 1}})                                    # 400
        raw.post("/bundles/", content=b"[1]", headers={"Content-Type": "application/json"})          # 400
        raw.get(f"{v1}/instances/", params={"after_token": "garbage"})                               # 400
        raw.get(f"{v1}/instances/", params={"select_filters": json.dumps({"dph_total": {"lt": 1}})})  # 400
        raw.get(f"{v1}/instances/", params={"limit": 1})                                             # paged
        p.list_instances("spec")
        p.terminate(inst.instance_id)
        p.terminate(inst.instance_id)                                                                # 404
        raw.get("/instances/424242/")                                                                # null
        for call in (lambda: bad.offers(GpuRequest(count=1)), lambda: bad.get("1"), lambda: bad.terminate("1"),
                     lambda: bad.list_instances("x"), lambda: bad.change_bid("1", 1.0), lambda: bad.stop("1")):
            with pytest.raises(ProviderError):
                call()
    finally:
        for c in (p, bad):
            c.close()
        raw.close()


def test_schema_names_its_source() -> None:
    assert SCHEMA["source"]["repo"] == "vast-ai/docs"
    assert SCHEMA["source"]["commit"] == "e758d3501e4308439edcf55424a4360b8c039d1b"


def test_every_route_the_fake_serves_is_in_the_spec() -> None:
    assert set(SPEC_ROUTES.values()) <= set(ROUTES)


def test_every_answer_is_a_documented_status_with_a_valid_body(fake: tuple[VastFake, str, list[Exchange]]) -> None:
    f, url, seen = fake
    _drive(f, url)
    undocumented = SCHEMA["undocumented_statuses"]
    statuses_seen: dict[tuple[str, str], set[int]] = {}
    problems = []
    for ex in seen:
        route = spec_route(ex.method, ex.path)
        assert route is not None, f"{ex.method} {ex.path} is not a route the spec has"
        statuses_seen.setdefault(route, set()).add(ex.status)
        key = f"{route[0]} {route[1]}"
        documented = ex.status in ROUTES[route]["statuses"]
        excused = str(ex.status) in undocumented.get(key, {}) or str(ex.status) in undocumented["*"]
        if not documented:
            assert excused, f"{key} answered {ex.status}, which neither the spec nor the schema lists"
            continue
        schema = SCHEMA["responses"][key][str(ex.status)]
        problems += [f"{key} {ex.status}: {e.message}" for e in validator(schema).iter_errors(ex.answer)]
    assert not problems, problems
    # The walk really did reach every route, and the failure statuses, not just the happy paths.
    assert set(statuses_seen) == set(SPEC_ROUTES.values())
    assert statuses_seen[("put", "/api/v0/asks/{id}")] >= {200, 400, 401, 403, 404, 429, 503}
    assert statuses_seen[("delete", "/api/v0/instances/{id}")] >= {200, 404}


def test_requests_the_adapter_sends_match_the_request_schemas(fake: tuple[VastFake, str, list[Exchange]]) -> None:
    f, url, _seen = fake
    _drive(f, url)
    by_route = {"post /api/v0/bundles": "search_request", "put /api/v0/asks/{id}": "create_request",
                "put /api/v0/instances/{id}": "manage_request", "put /api/v0/instances/bid_price/{id}": "bid_request"}
    adapter_bodies = [r for r in f.requests if r.user_agent.startswith("orch/") and r.body is not None]
    checked = 0
    for rec in adapter_bodies:
        route = spec_route(rec.method, rec.path)
        assert route is not None
        name = by_route.get(f"{route[0]} {route[1]}")
        if name is None:
            continue
        errors = [e.message for e in validator(DEFS[name]).iter_errors(rec.body)]
        assert not errors, (rec.path, rec.body, errors)
        checked += 1
    assert checked >= 6


def test_the_seeded_offers_carry_only_spec_fields() -> None:
    v = validator(DEFS["offer"])
    for offer in seed_offers():
        assert not [e.message for e in v.iter_errors(offer)]


def test_the_schema_rejects_what_vast_would_not_send() -> None:
    """The validation above can fail: wrong types, bad enums and unknown fields are caught."""
    offer = seed_offers()[0]
    assert list(validator(DEFS["offer"]).iter_errors({**offer, "gpu_ram": "24GB"}))
    assert list(validator(DEFS["offer"]).iter_errors({**offer, "surprise": 1}))
    create = {"client_id": "me", "image": "x", "runtype": "telnet"}
    assert list(validator(DEFS["create_request"]).iter_errors(create))
    list_ok = SCHEMA["responses"]["get /api/v1/instances"]["200"]
    assert list(validator(list_ok).iter_errors({"instances": [{"id": "seven"}]}))


def test_the_fake_refuses_search_manage_and_bid_bodies_outside_the_spec(
        fake: tuple[VastFake, str, list[Exchange]]) -> None:
    """POST /api/v0/bundles, PUT /api/v0/instances/{id} and PUT /api/v0/instances/bid_price/{id} (vast_fields.json
    search_request / manage_request / bid_request, from vast-ai/docs openapi.yaml @ e758d350): a body outside
    them is answered 400 in that route's error shape, never taken (nor a dropped connection)."""
    f, url, seen = fake
    p = VastProvider(fast_settings(url))
    raw = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {DEFAULT_API_KEY}"})
    try:
        iid = p.launch(_spec(7002001, Market.SPOT, new_launch_id())).instance_id
        refused = [
            raw.post("/bundles/", json={"order": [["score"]]}),                  # order entries are pairs
            raw.post("/bundles/", json={"limit": "64"}),                         # limit is an integer
            raw.post("/bundles/", json={"allocated_storage": "lots"}),           # a number
            raw.put(f"/instances/{iid}/", json={"label": "x" * 1025}),           # label maxLength 1024
            raw.put(f"/instances/{iid}/", json={"state": "paused"}),             # state: stopped | running
            raw.put(f"/instances/bid_price/{iid}/", json={"price": 1.0}),        # client_id is required
            raw.put(f"/instances/bid_price/{iid}/", json={"client_id": "me", "price": 33.0}),   # maximum 32
        ]
    finally:
        p.close()
        raw.close()
    assert [r.status_code for r in refused] == [400] * len(refused)
    assert all(r.json()["error"] in ("invalid_request", "invalid_args") for r in refused)
    inst = f.state.instances[int(iid)]
    assert len(inst["label"]) < 1025 and inst["actual_status"] != "paused" and inst["_bid"] != 33.0
    for ex in seen:
        route = spec_route(ex.method, ex.path)
        assert route is not None
        schema = SCHEMA["responses"][f"{route[0]} {route[1]}"][str(ex.status)]
        assert not [e.message for e in validator(schema).iter_errors(ex.answer)]


def test_a_search_that_matches_nothing_is_an_empty_list_not_a_refused_order_key() -> None:
    """The fake checked an order key against the first ask found, so a search matching nothing (every ask of a
    GPU rented) answered 400 'dph_total is not a valid order key' where Vast answers an empty list; an unknown
    key is still refused."""
    fake = VastFake()
    fake.start()
    try:
        assert fake._server is not None
        url = f"http://127.0.0.1:{fake._server.server_address[1]}/api/v0/bundles/"
        headers = {"Authorization": f"Bearer {fake.state.api_key}"}
        none = {"gpu_name": {"eq": "NO_SUCH_GPU"}, "type": "on-demand", "order": [["dph_total", "asc"]]}
        answer = httpx.post(url, json=none, headers=headers)
        assert (answer.status_code, answer.json()) == (200, {"offers": []})
        bad = {**none, "order": [["no_such_field", "asc"]]}
        assert httpx.post(url, json=bad, headers=headers).status_code == 400
    finally:
        fake.stop()
