"""GCP beyond the contract: the fake held to the GCE discovery document, request shapes, translation."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from providers.base import Market, new_launch_id
from providers.errors import AuthError, InstanceNotFoundError, ProviderUnavailableError, RateLimitedError
from providers.gcp.adapter import _NS, machine_and_accelerators, translate_error
from tests.contract.harness_gcp import GcpHarness, catalog_offer


def _discovery() -> dict[str, Any] | None:
    try:
        import googleapiclient
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(googleapiclient.__file__), "discovery_cache", "documents", "compute.v1.json")
    with open(path) as f:
        return json.load(f)


def _fix_refs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (f"#/schemas/{v}" if k == "$ref" else _fix_refs(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_fix_refs(v) for v in node]
    return node


@pytest.fixture(scope="module")
def gcp() -> Iterator[GcpHarness]:
    h = GcpHarness()
    yield h
    h.close()


def validator(name: str):  # type: ignore[no-untyped-def]
    from jsonschema import Draft4Validator

    doc = _discovery()
    if doc is None:
        pytest.skip("google-api-python-client (the GCE discovery document) is not installed")
    return Draft4Validator({"$ref": f"#/schemas/{name}", "schemas": _fix_refs(doc["schemas"])})


def test_fake_answers_and_adapter_requests_follow_the_discovery_document(gcp: GcpHarness) -> None:
    gcp.reset()
    p = gcp.provider()
    spec_ = gcp.launch_spec(new_launch_id(), "alice", Market.SPOT)
    inst = p.launch(spec_)
    zone, name = inst.instance_id.split("/")
    body = next(r[2] for r in gcp.fake.state.requests if r[0] == "POST" and r[1].endswith("/instances"))
    assert not list(validator("Instance").iter_errors(body))
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert body["scheduling"]["instanceTerminationAction"] == "STOP"
    assert body["labels"] == {"orch-launch-id": spec_.launch_id, "orch-owner": "alice", "orch-job": "contract"}
    assert {"key": "startup-script", "value": spec_.startup_script} in body["metadata"]["items"]
    path = f"/compute/v1/projects/{gcp.fake.project}/zones/{zone}/instances/{name}"
    status, doc = gcp.fake.handle("GET", path, {}, {})
    assert status == 200 and not list(validator("Instance").iter_errors(doc))
    for op in gcp.fake.state.operations.values():
        assert not list(validator("Operation").iter_errors(op))
    status, listing = gcp.fake.handle("GET", f"/compute/v1/projects/{gcp.fake.project}/aggregated/instances", {}, {})
    assert not list(validator("InstanceAggregatedList").iter_errors(listing))
    assert list(validator("Operation").iter_errors({"name": "x", "status": "FINISHED"}))   # the check bites


def test_insert_request_id_is_derived_from_the_launch_id_and_dedupes(gcp: GcpHarness) -> None:
    gcp.reset()
    p = gcp.provider()
    spec_ = gcp.launch_spec(new_launch_id(), "alice")
    p.launch(spec_)
    inserts = [r for r in gcp.fake.state.requests if r[0] == "POST" and r[1].endswith("/instances")]
    assert len(inserts) == 1
    assert str(uuid.uuid5(_NS, spec_.launch_id)) in gcp.fake.state.request_ids


def test_n1_with_attached_gpus_and_accelerator_optimized_types() -> None:
    machine, accels = machine_and_accelerators("n1-standard-8+4xT4", "us-central1-a")
    assert machine == "n1-standard-8"
    assert [(a.accelerator_count, a.accelerator_type) for a in accels] == [
        (4, "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4")]
    assert machine_and_accelerators("a2-ultragpu-4g", "us-east5-a") == ("a2-ultragpu-4g", [])
    assert catalog_offer("n1-standard-8+8xV100", "us-central1", Market.ON_DEMAND).gpu == "V100-16G"


def _api_error(cls: type, reason: str) -> Exception:
    return cls("boom", errors=[{"reason": reason, "message": "boom"}])


def test_translate_error() -> None:
    assert isinstance(translate_error(_api_error(gexc.TooManyRequests, "rateLimitExceeded")), RateLimitedError)
    assert isinstance(translate_error(_api_error(gexc.Unauthorized, "authError")), AuthError)
    assert isinstance(translate_error(_api_error(gexc.Forbidden, "forbidden")), AuthError)
    assert isinstance(translate_error(_api_error(gexc.NotFound, "notFound")), InstanceNotFoundError)
    assert isinstance(translate_error(_api_error(gexc.ServiceUnavailable, "backendError")), ProviderUnavailableError)
