"""The GCE fake is held to Google's own contract: the compute v1 Discovery document shipped in
google-api-python-client. Its responses (Instance, InstanceList, InstanceAggregatedList, Operation,
OperationList) and the adapter's insert body must validate, every route it served must be a documented
method, and status enums come from the document, not from memory."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft4Validator

from providers.base import LaunchSpec, Market
from tests.contract.harness_gcp import catalog_offer
from tests.fakes.gce import GceFake

try:
    import googleapiclient
except ImportError:  # pragma: no cover - the dev environment has it
    pytest.skip("google-api-python-client (which ships compute.v1.json) is not installed", allow_module_level=True)

DOC = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / "compute.v1.json"
PROJECT, ZONE = "orch-test", "us-central1-a"
ROOT = f"/compute/v1/projects/{PROJECT}"


@cache
def discovery() -> dict[str, Any]:
    return json.loads(DOC.read_text())


def _fix_refs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (f"#/schemas/{v}" if k == "$ref" and isinstance(v, str) else _fix_refs(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_fix_refs(v) for v in node]
    return node


@cache
def _schemas() -> dict[str, Any]:
    return _fix_refs(discovery()["schemas"])


def errors_for(schema: str, value: Any) -> list[str]:
    validator = Draft4Validator({"$ref": f"#/schemas/{schema}", "schemas": _schemas()})
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)]


def _routes() -> list[tuple[str, re.Pattern[str], str]]:
    """(httpMethod, path regex, response schema) for the instances, zoneOperations, firewalls,
    globalOperations, resourcePolicies and regionOperations methods."""
    out = []
    for resource in ("instances", "zoneOperations", "firewalls", "globalOperations", "resourcePolicies",
                     "regionOperations"):
        for method in discovery()["resources"][resource]["methods"].values():
            pattern = re.sub(r"\{[^}]+\}", "[^/]+", method["path"])
            out.append((method["httpMethod"], re.compile(f"^/compute/v1/{pattern}$"),
                        method.get("response", {}).get("$ref", "")))
    return out


def documented_response(method: str, path: str) -> str | None:
    for http_method, pattern, response in _routes():
        if http_method == method and pattern.match(path):
            return response
    return None


@pytest.fixture
def fake() -> Iterator[GceFake]:
    yield GceFake()


def _instance_body(market: Market = Market.SPOT, instance_type: str = "n1-standard-8+4xT4",
                   **settings: Any) -> dict[str, Any]:
    pytest.importorskip("google.cloud.compute_v1")
    from google.cloud import compute_v1

    from providers.gcp.settings import Settings
    from providers.gcp.vm import instance_body

    spec = LaunchSpec(launch_id="l0123456789ab", owner="alice", job="train", offer=catalog_offer(market, instance_type),
                      ssh_public_key="ssh-ed25519 AAAAKEY me", startup_script="#!/bin/sh\n")
    body = instance_body(Settings(project=PROJECT, anonymous_credentials=True, **settings), spec, ZONE)
    as_json: dict[str, Any] = json.loads(compute_v1.Instance.to_json(body))
    return as_json


def _exercise(fake: GceFake) -> None:
    """One of everything the adapter does, straight at the fake (no HTTP needed to check shapes)."""
    body = _instance_body()
    name = body["name"]
    status, op = fake.handle("POST", f"{ROOT}/zones/{ZONE}/instances", {"requestId": "r-1"}, body)
    assert status == 200
    fake.handle("POST", f"{ROOT}/zones/{ZONE}/operations/{op['name']}/wait", {}, None)
    fake.handle("GET", f"{ROOT}/zones/{ZONE}/operations/{op['name']}", {}, None)
    fake.handle("GET", f"{ROOT}/zones/{ZONE}/instances/{name}", {}, None)
    fake.handle("GET", f"{ROOT}/zones/{ZONE}/instances", {"filter": 'labels.orch-owner = "alice"'}, None)
    fake.handle("GET", f"{ROOT}/aggregated/instances", {"filter": 'labels.orch-owner = "alice"'}, None)
    fake.preempt(ZONE, name)
    fake.handle("GET", f"{ROOT}/zones/{ZONE}/operations",
                {"filter": '(operationType = "compute.instances.preempted")'}, None)
    fake.handle("POST", f"{ROOT}/zones/{ZONE}/instances/{name}/stop", {}, None)
    fake.handle("DELETE", f"{ROOT}/zones/{ZONE}/instances/{name}", {}, None)
    fake.inject("capacity")
    status, failed = fake.handle("POST", f"{ROOT}/zones/{ZONE}/instances", {"requestId": "r-2"},
                                 {**body, "name": "orch-alice-l0000000000ff"})
    fake.handle("POST", f"{ROOT}/zones/{ZONE}/operations/{failed['name']}/wait", {}, None)
    rule = _firewall_body()
    _, fw_op = fake.handle("POST", f"{ROOT}/global/firewalls", {"requestId": "r-3"}, rule)
    fake.handle("POST", f"{ROOT}/global/operations/{fw_op['name']}/wait", {}, None)
    fake.handle("GET", f"{ROOT}/global/operations/{fw_op['name']}", {}, None)
    fake.handle("GET", f"{ROOT}/global/firewalls/{rule['name']}", {}, None)
    fake.handle("GET", f"{ROOT}/global/firewalls", {}, None)
    fake.handle("PATCH", f"{ROOT}/global/firewalls/{rule['name']}", {}, {"sourceRanges": ["198.51.100.0/24"]})
    fake.handle("DELETE", f"{ROOT}/global/firewalls/{rule['name']}", {}, None)
    policy = _policy_body()
    region = f"{ROOT}/regions/us-central1"
    _, p_op = fake.handle("POST", f"{region}/resourcePolicies", {"requestId": "r-4"}, policy)
    fake.handle("POST", f"{region}/operations/{p_op['name']}/wait", {}, None)
    fake.handle("GET", f"{region}/operations/{p_op['name']}", {}, None)
    fake.handle("GET", f"{region}/resourcePolicies/{policy['name']}", {}, None)
    fake.handle("GET", f"{region}/resourcePolicies", {}, None)
    fake.handle("GET", f"{ROOT}/aggregated/resourcePolicies", {}, None)
    fake.handle("DELETE", f"{region}/resourcePolicies/{policy['name']}", {}, None)


def _policy_body() -> dict[str, Any]:
    """The compact placement policy the adapter inserts, as JSON (built by the adapter's own code)."""
    pytest.importorskip("google.cloud.compute_v1")
    from google.cloud import compute_v1

    from providers.gcp.placement import policy_body, policy_name

    body = policy_body(policy_name("alice", "j7-g0"), owner="alice", gang="j7-g0", launch_id="l0123456789ab")
    as_json: dict[str, Any] = json.loads(compute_v1.ResourcePolicy.to_json(body))
    return as_json


def _firewall_body() -> dict[str, Any]:
    """The rule the adapter inserts, as JSON (built by the adapter's own code)."""
    pytest.importorskip("google.cloud.compute_v1")
    from google.cloud import compute_v1

    from providers.gcp.network import wanted_rules

    [rule] = wanted_rules("alice", "global/networks/default", ["203.0.113.7/32"])
    as_json: dict[str, Any] = json.loads(compute_v1.Firewall.to_json(rule))
    return as_json


def test_every_response_validates_against_its_documented_schema(fake: GceFake) -> None:
    recorded: list[tuple[str, str, dict[str, Any]]] = []
    original = fake.handle

    def spy(method: str, path: str, query: dict[str, str], body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        status, payload = original(method, path, query, body)
        recorded.append((method, path, payload) if status == 200 else (method, path, {}))
        return status, payload

    fake.handle = spy  # type: ignore[method-assign]
    _exercise(fake)
    assert len(recorded) == 25
    checked = set()
    for method, path, payload in recorded:
        schema = documented_response(method, path)
        assert schema, f"{method} {path} is not a documented method of the resources _routes names"
        assert payload, f"{method} {path} failed"
        assert not errors_for(schema, payload), (method, path, errors_for(schema, payload))
        checked.add(schema)
    assert checked == {"Operation", "Instance", "InstanceList", "InstanceAggregatedList", "OperationList",
                       "Firewall", "FirewallList", "ResourcePolicy", "ResourcePolicyList",
                       "ResourcePolicyAggregatedList"}


def test_the_validator_is_not_a_rubber_stamp(fake: GceFake) -> None:
    _, op = fake.handle("POST", f"{ROOT}/zones/{ZONE}/instances", {}, _instance_body())
    assert errors_for("Operation", {**op, "status": "FINISHED"})
    assert errors_for("Instance", {"name": "x", "guestAccelerators": [{"acceleratorCount": "four"}]})


def test_failed_operation_carries_gce_error_shape(fake: GceFake) -> None:
    fake.inject("capacity")
    _, op = fake.handle("POST", f"{ROOT}/zones/{ZONE}/instances", {"requestId": "r"}, _instance_body())
    _, done = fake.handle("POST", f"{ROOT}/zones/{ZONE}/operations/{op['name']}/wait", {}, None)
    assert not errors_for("Operation", done)
    assert done["status"] == "DONE" and done["httpErrorStatusCode"] == 503
    assert [e["code"] for e in done["error"]["errors"]] == ["ZONE_RESOURCE_POOL_EXHAUSTED"]


@pytest.mark.parametrize("market", [Market.SPOT, Market.ON_DEMAND])
@pytest.mark.parametrize("instance_type", ["n1-standard-8+4xT4", "g2-standard-24"])
def test_adapter_insert_body_validates_as_instance(market: Market, instance_type: str) -> None:
    body = _instance_body(market, instance_type)
    assert not errors_for("Instance", body)
    # Discovery schemas allow extra keys; flag any top-level field GCE does not define.
    assert set(body) <= set(discovery()["schemas"]["Instance"]["properties"])
    assert set(body["tags"]) <= set(discovery()["schemas"]["Tags"]["properties"])
    assert set(body["scheduling"]) <= set(discovery()["schemas"]["Scheduling"]["properties"])


def test_adapter_insert_body_with_a_service_account_validates() -> None:
    body = _instance_body(service_account="orch-node@orch-test.iam.gserviceaccount.com")
    assert not errors_for("Instance", body)
    assert set(body["serviceAccounts"][0]) <= set(discovery()["schemas"]["ServiceAccount"]["properties"])
    assert errors_for("Instance", {**body, "serviceAccounts": [{"email": 7}]}), "the check can fail"


def test_adapter_firewall_body_validates_as_firewall() -> None:
    body = _firewall_body()
    assert not errors_for("Firewall", body)
    assert set(body) <= set(discovery()["schemas"]["Firewall"]["properties"])
    assert set(body["allowed"][0]) <= {"IPProtocol", "ports"}     # the document's Firewall.allowed[] items


def test_fake_refuses_a_rule_mixing_ipv4_and_ipv6(fake: GceFake) -> None:
    status, body = fake.handle("POST", f"{ROOT}/global/firewalls", {},
                               {**_firewall_body(), "sourceRanges": ["203.0.113.0/24", "2001:db8::/32"]})
    assert status == 400 and body["error"]["errors"][0]["reason"] == "invalid"


@pytest.mark.parametrize("key", ["targetTags", "sourceTags"])
def test_fake_refuses_a_rule_naming_a_tag_that_is_not_an_rfc1035_label(fake: GceFake, key: str) -> None:
    status, body = fake.handle("POST", f"{ROOT}/global/firewalls", {}, {**_firewall_body(), key: ["orch-team-"]})
    assert status == 400 and body["error"]["errors"][0]["reason"] == "invalid"
    assert f"'resource.{key}[0]': 'orch-team-'. Must be a match of regex" in body["error"]["message"]
    assert fake.firewall(_firewall_body()["name"]) is None


def test_status_enums_come_from_the_document() -> None:
    pytest.importorskip("google.cloud.compute_v1")
    from providers.gcp.instances import _STATES

    instance_statuses = set(discovery()["schemas"]["Instance"]["properties"]["status"]["enum"])
    assert set(_STATES) == instance_statuses, "every documented Instance.status has a mapping, no invented ones"
    # (The fake's statuses are checked against the same enum by the schema validation above.)


def test_errors_use_googles_json_error_format(fake: GceFake) -> None:
    status, body = fake.handle("GET", f"{ROOT}/zones/{ZONE}/instances/nope", {}, None)
    assert status == 404
    err = body["error"]
    assert err["code"] == 404 and err["status"] == "NOT_FOUND" and err["errors"][0]["reason"] == "notFound"
    fake.inject("throttle")
    status, body = fake.handle("POST", f"{ROOT}/zones/{ZONE}/instances", {}, _instance_body())
    assert status == 429 and body["error"]["errors"][0]["reason"] == "rateLimitExceeded"


# -- refusals: GCE's schema and limits, in GCE's words, and the adapter's typed errors ----------------

def test_the_adapter_s_insert_bodies_are_accepted(fake: GceFake) -> None:
    _exercise(fake)
    assert fake.refusals == []


@pytest.mark.parametrize(("change", "status", "reason", "words"), [
    (lambda b: b["disks"][0]["initializeParams"].update(sourceImage="pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"),
     400, "invalid", "sourceImage': 'pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime'. The URL is malformed."),
    (lambda b: b["metadata"]["items"].append({"key": "startup-script", "value": "x" * 262145}),
     413, "fieldSizeTooLarge", "maximum size 262144 character(s); actual size 262145."),
    (lambda b: b["metadata"]["items"].extend({"key": f"k{i}", "value": "x" * 200000} for i in range(3)),
     413, "fieldSizeTooLarge", "Value for field 'resource.metadata' is too large"),
    (lambda b: b["metadata"]["items"].append({"key": "bad key!", "value": "v"}), 400, "invalid", "items"),
    (lambda b: b.update(bogusField=1), 400, "badRequest", 'Unknown name "bogusField"'),
    # Labels (Compute Engine docs, "Organize resources using labels"): the Discovery schema alone takes these.
    (lambda b: b.update(labels={"orch-job": "My.Run"}), 400, "invalid", "Label value 'My.Run' violates"),
    (lambda b: b.update(labels={"orch-job": "x" * 64}), 400, "invalid", "at most 63 characters"),
    (lambda b: b.update(labels={"Orch-Job": "x"}), 400, "invalid", "Label key 'Orch-Job' violates"),
    (lambda b: b.update(labels={f"k{i}": "v" for i in range(65)}), 400, "invalid", "at most 64"),
    (lambda b: b["disks"][0]["initializeParams"].update(labels={"orch-job": "A"}), 400, "invalid",
     "resource.disks[0].initializeParams.labels"),
    (lambda b: b["scheduling"].update(provisioningModel="CHEAP"), 400, "invalid", "scheduling.provisioningModel"),
    # Network tags (Discovery document, Tags.items: RFC 1035 labels; the pattern is on the array, unchecked there).
    (lambda b: b.update(tags={"items": ["orch-team-"]}), 400, "invalid",
     "'resource.tags.items[0]': 'orch-team-'. Must be a match of regex"),
    (lambda b: b.update(tags={"items": ["Orch"]}), 400, "invalid", "'resource.tags.items[0]': 'Orch'"),
    # Scheduling combinations (tests/fakes/gce_contract.py: GPUs cannot live-migrate, Spot cannot restart): each
    # field is a valid enum value, so the Discovery schema alone takes them.
    (lambda b: b["scheduling"].update(automaticRestart=True), 400, "invalid",
     "Scheduling must have preemptible be false when AutomaticRestart is true."),
    (lambda b: b["scheduling"].update(onHostMaintenance="MIGRATE"), 400, "invalid",
     "resource.scheduling.onHostMaintenance': 'MIGRATE'"),
    (lambda b: b.update(scheduling={"provisioningModel": "STANDARD", "onHostMaintenance": "MIGRATE"}), 400,
     "invalid", "Instances with guest accelerators do not support live migration."),
    (lambda b: b.update(scheduling={"provisioningModel": "STANDARD"}), 400, "invalid",     # absent: MIGRATE
     "Instances with guest accelerators do not support live migration."),
    (lambda b: (b.pop("guestAccelerators"), b.update(machineType=f"zones/{ZONE}/machineTypes/g2-standard-4",
                                                     scheduling={"automaticRestart": True})),
     400, "invalid", "Instances with guest accelerators do not support live migration."),
])
def test_fake_refuses_what_gce_refuses(fake: GceFake, change: Any, status: int, reason: str, words: str) -> None:
    body = _instance_body()
    body.setdefault("metadata", {}).setdefault("items", [])
    change(body)
    got, answer = fake.handle("POST", f"{ROOT}/zones/{ZONE}/instances", {}, body)
    assert got == status and answer["error"]["errors"][0]["reason"] == reason
    assert words in answer["error"]["message"], answer["error"]["message"]
    assert fake.instance(ZONE, body["name"]) is None


def test_a_vm_without_gpus_may_live_migrate(fake: GceFake) -> None:
    body = _instance_body(Market.ON_DEMAND)
    body.pop("guestAccelerators")
    body.update(machineType=f"zones/{ZONE}/machineTypes/n1-standard-8", scheduling={"provisioningModel": "STANDARD"})
    status, _ = fake.handle("POST", f"{ROOT}/zones/{ZONE}/instances", {}, body)
    assert status == 200 and fake.refusals == []


def test_a_family_and_a_full_image_url_are_accepted(fake: GceFake) -> None:
    for image in ("projects/debian-cloud/global/images/family/debian-12",
                  "https://www.googleapis.com/compute/v1/projects/ubuntu-os-cloud/global/images/ubuntu-2204-v20240101",
                  "global/images/my-image"):
        body = _instance_body()
        body["disks"][0]["initializeParams"]["sourceImage"] = image
        status, _ = fake.handle("POST", f"{ROOT}/zones/{ZONE}/instances", {}, body)
        assert status == 200, image
        fake.reset()


def _provider_over_http(**settings: Any) -> Any:
    from providers.gcp.adapter import GcpProvider
    from providers.gcp.settings import Settings
    from tests.fakes.gce import GceServer

    server = GceServer().start()
    provider = GcpProvider(Settings(project=PROJECT, zones=[ZONE], api_endpoint=server.endpoint,
                                    anonymous_credentials=True, retry_attempts=2, retry_initial_wait_s=0.001,
                                    retry_max_wait_s=0.01, retry_deadline_s=600.0, operation_timeout_s=10.0,
                                    **settings))
    return server, provider


def _spec(market: Market = Market.ON_DEMAND, script: str = "#!/bin/sh\n") -> LaunchSpec:
    from tests.contract.harness_gcp import catalog_offer as gcp_offer

    return LaunchSpec(launch_id="l0123456789ab", owner="alice", job="train", offer=gcp_offer(market),
                      ssh_public_key="ssh-ed25519 AAAAKEY me", startup_script=script)


@pytest.mark.parametrize(("settings", "script", "fault", "error", "code"), [
    ({"image": "pytorch/pytorch:latest"}, "#!/bin/sh\n", None, "InvalidRequestError", "invalid"),
    ({}, "#!/bin/sh\n" + "#" * 262144, None, "InvalidRequestError", "fieldSizeTooLarge"),
    ({}, "#!/bin/sh\n", "capacity", "InsufficientCapacityError", "ZONE_RESOURCE_POOL_EXHAUSTED"),
    ({}, "#!/bin/sh\n", "quota", "QuotaExceededError", "QUOTA_EXCEEDED"),
    ({}, "#!/bin/sh\n", "throttle", "RateLimitedError", None),
])
def test_known_refusals_reach_orch_typed(settings: dict[str, Any], script: str, fault: str | None, error: str,
                                         code: str | None) -> None:
    pytest.importorskip("google.cloud.compute_v1")
    import providers.errors as errors

    server, provider = _provider_over_http(**settings)
    try:
        if fault:
            server.fake.inject(fault, times=10)
        with pytest.raises(getattr(errors, error)) as err:
            provider.launch(_spec(script=script))
        if code:
            assert code in (err.value.code or ""), err.value
    finally:
        provider.close()
        server.stop()
