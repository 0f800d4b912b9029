"""The Lambda and RunPod fakes are held to the providers' published contracts, not to our memory of them.

Lambda: every answer the fake gave during a full adapter session validates against Lambda's OpenAPI 1.8.3
(copied under tests/fakes/schemas/, recipe from the spec README), and every body the adapter sent validates
against the spec's request schemas with no field outside them. RunPod (no GraphQL schema published, and its
REST spec carries no license): the same against tests/fakes/schemas/runpod_fields.json, derived from
RunPod's own client and REST spec with sources cited in PROVENANCE.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from providers.base import GpuRequest, LaunchSpec, new_launch_id
from providers.errors import AuthError, InsufficientCapacityError, QuotaExceededError
from providers.lambdalabs.adapter import LambdaProvider
from providers.lambdalabs.instances import STATES
from providers.runpod.adapter import RunPodProvider
from providers.runpod.instances import map_state
from tests.contract import harness_lambda, harness_runpod
from tests.fakes import lambda_cloud
from tests.fakes.graphql_lite import parse
from tests.fakes.lambda_cloud import LambdaFake, start_lambda_fake
from tests.fakes.lr_base import Recorded
from tests.fakes.runpod import DEPLOY_FIELDS, RunPodFake, start_runpod_fake

SCHEMAS = Path(__file__).parent / "fakes" / "schemas"
LAMBDA_SPEC: dict[str, Any] = json.loads((SCHEMAS / "lambda-cloud-openapi-1.8.3.json").read_text())
RUNPOD: dict[str, Any] = json.loads((SCHEMAS / "runpod_fields.json").read_text())

# Lambda's spec declares no 429 or 500 answers on these paths; the fake's are checked separately below.
UNDECLARED_STATUSES = {429, 500}


def response_validator(spec: dict[str, Any], path: str, method: str, status: str) -> Draft202012Validator:
    schema = spec["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
    return Draft202012Validator({**schema, "components": spec["components"]})


def component_validator(spec: dict[str, Any], name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": spec["components"]})


def runpod_validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": RUNPOD["$defs"]})


def _errors(validator: Draft202012Validator, instance: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(instance)]


def _template(path: str) -> str | None:
    for template in LAMBDA_SPEC["paths"]:
        if re.fullmatch(re.sub(r"\{[^/]+\}", "[^/]+", template), path):
            return template
    return None


# -- Lambda -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lambda_requests() -> Iterator[list[Recorded]]:
    """A full adapter session against the fake (happy path, faults, misses); yields what the fake recorded."""
    fake: LambdaFake
    fake, server = start_lambda_fake()
    p = LambdaProvider(harness_lambda.fast_settings(f"{server.url}/api/v1"), catalog=())

    def spec_for(launch_id: str) -> LaunchSpec:
        return LaunchSpec(launch_id=launch_id, owner="specs", job="j", offer=harness_lambda.h100_offer(),
                          ssh_public_key=harness_lambda.PUBLIC_KEY, startup_script="#!/bin/sh\ntrue\n")

    spec = spec_for(new_launch_id())
    p.offers(GpuRequest(count=8))
    inst = p.launch(spec)
    p.launch(spec)
    p.get(inst.instance_id)
    p.list_instances("specs")
    p.terminate(inst.instance_id)
    p.get(inst.instance_id)
    p.get(inst.instance_id)
    p.get(inst.instance_id)
    p.terminate(inst.instance_id)
    for fault, error in (("capacity", InsufficientCapacityError), ("quota", QuotaExceededError)):
        fake.faults.arm(fault, 1)
        with pytest.raises(error):
            p.launch(spec_for(new_launch_id()))
    fake.faults.arm("server_error", 1)
    p.offers(GpuRequest(count=8))  # a 500, retried
    fake.faults.arm("auth", 1)
    with pytest.raises(AuthError):
        p.offers(GpuRequest(count=8))
    yield list(fake.requests)
    p.close()
    server.stop()


def test_every_route_the_fake_serves_is_in_the_spec() -> None:
    for method, path in lambda_cloud.ROUTES:
        assert method in LAMBDA_SPEC["paths"][path], (method, path)


def test_every_lambda_answer_validates_against_the_spec(lambda_requests: list[Recorded]) -> None:
    seen_statuses = set()
    for r in lambda_requests:
        template = _template(r.path)
        assert template is not None, r.path
        seen_statuses.add(r.status)
        if r.status in UNDECLARED_STATUSES:
            continue
        assert str(r.status) in LAMBDA_SPEC["paths"][template][r.method.lower()]["responses"], (r.method, r.path)
        errors = _errors(response_validator(LAMBDA_SPEC, template, r.method.lower(), str(r.status)), r.reply)
        assert not errors, (r.method, r.path, r.status, errors)
    assert {200, 400, 401, 404}.issubset(seen_statuses)  # the session really covered the failure answers


def test_undeclared_lambda_answers_keep_the_error_envelope(lambda_requests: list[Recorded]) -> None:
    internal = component_validator(LAMBDA_SPEC, "ApiErrorInternal")
    failures = [r for r in lambda_requests if r.status in UNDECLARED_STATUSES]
    assert failures
    for r in failures:
        assert set(r.reply) == {"error"} and {"code", "message"} <= set(r.reply["error"])
        if r.status == 500:
            assert not _errors(internal, r.reply["error"])


def test_adapter_request_bodies_follow_the_spec(lambda_requests: list[Recorded]) -> None:
    schemas = {"/api/v1/instance-operations/launch": "InstanceLaunchRequest",
               "/api/v1/instance-operations/terminate": "InstanceTerminateRequest",
               "/api/v1/ssh-keys": "AddSSHKeyRequest"}
    posted = [r for r in lambda_requests if r.method == "POST"]
    assert {r.path for r in posted} == set(schemas)
    for r in posted:
        name = schemas[r.path]
        assert not _errors(component_validator(LAMBDA_SPEC, name), r.body), (name, r.body)
        allowed = set(LAMBDA_SPEC["components"]["schemas"][name]["properties"])
        assert set(r.body) <= allowed, (name, set(r.body) - allowed)


def test_lambda_states_are_the_specs() -> None:
    assert set(STATES) == set(LAMBDA_SPEC["components"]["schemas"]["InstanceStatus"]["enum"])


def test_lambda_error_codes_are_the_specs(lambda_requests: list[Recorded]) -> None:
    spec_codes = {s["properties"]["code"]["const"] for n, s in LAMBDA_SPEC["components"]["schemas"].items()
                  if n.startswith("ApiError")}
    emitted = {r.reply["error"]["code"] for r in lambda_requests if r.status >= 400 and r.status != 429}
    assert emitted and emitted <= spec_codes


# -- RunPod -------------------------------------------------------------------------------------------

def test_lambda_fake_refuses_ssh_key_and_terminate_bodies_outside_the_spec() -> None:
    """POST /api/v1/ssh-keys (AddSSHKeyRequest: name 1-64 characters, public_key at most 4096) and POST
    /api/v1/instance-operations/terminate (InstanceTerminateRequest: instance_ids required), Lambda OpenAPI 1.8.3:
    a body outside them is a 400 global/invalid-parameters, and nothing is registered."""
    fake = LambdaFake()
    auth = {"Authorization": "Bearer test-key"}
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICN+lJwsONkwrdsSnQsu1ydUkIuIg5oOC+Eslvmtt60T me"
    bad_keys = [{"name": "k" * 65, "public_key": key}, {"name": "k", "public_key": "ssh-rsa " + "A" * 4096},
                {"name": "", "public_key": key}]
    for body in bad_keys:
        reply = fake.handle("POST", "/api/v1/ssh-keys", body, auth)
        assert reply.status == 400, body
        assert not _errors(response_validator(LAMBDA_SPEC, "/api/v1/ssh-keys", "post", "400"), reply.body)
    assert fake.ssh_keys == []
    assert fake.handle("POST", "/api/v1/ssh-keys", {"name": "k" * 64, "public_key": key}, auth).status == 200
    reply = fake.handle("POST", "/api/v1/instance-operations/terminate", {"ids": ["x"]}, auth)
    assert reply.status == 400 and reply.body["error"]["code"] == "global/invalid-parameters"


@pytest.fixture(scope="module")
def runpod_requests() -> Iterator[list[Recorded]]:
    fake: RunPodFake
    fake, server = start_runpod_fake()
    p = RunPodProvider(harness_runpod.fast_settings(f"{server.url}/graphql"))

    def spec_for(launch_id: str) -> LaunchSpec:
        return LaunchSpec(launch_id=launch_id, owner="specs", job="j", offer=harness_runpod.a100_offer(),
                          ssh_public_key=harness_runpod.PUBLIC_KEY, startup_script="#!/bin/sh\ntrue\n")

    spec = spec_for(new_launch_id())
    p.offers(GpuRequest(count=1))
    inst = p.launch(spec)
    p.launch(spec)
    p.get(inst.instance_id)
    p.get(inst.instance_id)
    p.list_instances("specs")
    p.stop(inst.instance_id)
    p.get(inst.instance_id)
    p.terminate(inst.instance_id)
    p.terminate(inst.instance_id)
    p.get(inst.instance_id)
    for fault, error in (("capacity", InsufficientCapacityError), ("quota", QuotaExceededError)):
        fake.faults.arm(fault, 1)
        with pytest.raises(error):
            p.launch(spec_for(new_launch_id()))
    yield list(fake.requests)
    p.close()
    server.stop()


ROOT_TYPES = {"gpuTypes": "GpuType", "pod": "Pod", "podFindAndDeployOnDemand": "Pod", "podStop": "Pod"}
INPUT_TYPES = {"podFindAndDeployOnDemand": "PodFindAndDeployOnDemandInput", "pod": "PodIdInput",
               "podStop": "PodIdInput", "podTerminate": "PodIdInput"}


def _root_field(query: str) -> str:
    return parse(query).fields[0].name


def test_every_runpod_answer_validates_against_the_derived_schema(runpod_requests: list[Recorded]) -> None:
    envelope = runpod_validator("Envelope")
    roots = set()
    for r in runpod_requests:
        assert r.status == 200, (r.status, r.reply)
        assert not _errors(envelope, r.reply), r.reply
        for root, value in (r.reply.get("data") or {}).items():
            roots.add(root)
            if root == "myself":
                value = value["pods"]
                root = "pod"
            if value is None or root not in ROOT_TYPES:
                continue
            validator = runpod_validator(ROOT_TYPES[root])
            for item in value if isinstance(value, list) else [value]:
                assert not _errors(validator, item), (root, item, _errors(validator, item))
    assert roots == {"gpuTypes", "myself", "pod", "podFindAndDeployOnDemand", "podStop", "podTerminate"}


def test_runpod_errors_are_http_200_graphql_errors(runpod_requests: list[Recorded]) -> None:
    messages = [e["message"] for r in runpod_requests for e in r.reply.get("errors", [])]
    assert "pod not found to terminate" in messages
    assert any(m.startswith("There are no longer any instances available") for m in messages)


def test_adapter_inputs_follow_the_derived_schema(runpod_requests: list[Recorded]) -> None:
    checked = set()
    for r in runpod_requests:
        root = _root_field(r.body["query"])
        if root in INPUT_TYPES:
            inp = r.body["variables"]["input"]
            assert not _errors(runpod_validator(INPUT_TYPES[root]), inp), (root, inp)
            checked.add(root)
    assert checked == set(INPUT_TYPES)


def test_fake_accepts_exactly_the_documented_deploy_fields() -> None:
    assert set(RUNPOD["$defs"]["PodFindAndDeployOnDemandInput"]["properties"]) == DEPLOY_FIELDS


def test_every_documented_desired_status_is_mapped() -> None:
    enum = RUNPOD["$defs"]["DesiredStatus"]["enum"]
    states = {s: map_state({"desiredStatus": s, "runtime": {"ports": []}}) for s in enum}
    assert {s: v.value for s, v in states.items()} == {"RUNNING": "running", "EXITED": "stopped",
                                                        "TERMINATED": "terminated"}


def test_the_validators_bite(lambda_requests: list[Recorded], runpod_requests: list[Recorded]) -> None:
    """The checks above could not pass by accident: the same validators reject slightly wrong answers."""
    got = next(r for r in lambda_requests if r.path.startswith("/api/v1/instances/") and r.status == 200)
    wrong = {"data": {**got.reply["data"], "status": "running"}}
    assert _errors(response_validator(LAMBDA_SPEC, "/api/v1/instances/{id}", "get", "200"), wrong)
    assert _errors(response_validator(LAMBDA_SPEC, "/api/v1/instances/{id}", "get", "200"), {**got.reply, "x": 1})
    pod = next(r.reply["data"]["pod"] for r in runpod_requests if (r.reply.get("data") or {}).get("pod"))
    assert _errors(runpod_validator("Pod"), {**pod, "desiredStatus": "STOPPED"})
    assert _errors(runpod_validator("Pod"), {**pod, "bidPerGpu": 0.2})
