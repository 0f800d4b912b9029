"""GcpProvider details the contract suite does not pin: error translation, request shapes, requestId
determinism, preemption detection, lazy project/credential resolution. Against tests/fakes/gce.py."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.cloud.compute_v1")

import google.auth
import google.auth.exceptions
import requests.exceptions
from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from providers.base import LABEL_JOB, LABEL_LAUNCH_ID, LABEL_OWNER, InstanceState, LaunchSpec, Market, ResourceKind
from providers.errors import (
    AuthError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)
from providers.gcp.adapter import GcpProvider
from providers.gcp.errors import OperationError, translate_error
from providers.gcp.instances import PREEMPTED_OPERATION
from providers.gcp.machines import machine_shape
from providers.gcp.settings import Settings
from providers.gcp.vm import label_value, request_id
from tests.contract.harness_gcp import catalog_offer
from tests.fakes.gce import GceServer

PROJECT = "orch-test"
ZONE = "us-central1-a"


@pytest.fixture(scope="module")
def server() -> Iterator[GceServer]:
    srv = GceServer().start()
    yield srv
    srv.stop()


def _settings(server: GceServer, **overrides: Any) -> Settings:
    base: dict[str, Any] = dict(project=PROJECT, zones=[ZONE, "us-east1-b"], api_endpoint=server.endpoint,
                                anonymous_credentials=True, retry_attempts=4, retry_initial_wait_s=0.001,
                                retry_max_wait_s=0.01, retry_deadline_s=600.0, operation_timeout_s=10.0)
    return Settings(**(base | overrides))


@pytest.fixture
def provider(server: GceServer) -> Iterator[GcpProvider]:
    server.fake.reset()
    p = GcpProvider(_settings(server))
    yield p
    p.close()
    server.fake.reset()


def _spec(launch_id: str, market: Market = Market.ON_DEMAND, instance_type: str = "g2-standard-24",
          region: str = "us-central1", **kw: Any) -> LaunchSpec:
    return LaunchSpec(launch_id=launch_id, owner="alice", job="Train_Llama.v2", offer=catalog_offer(market,
                      instance_type, region), **kw)


def _inserts(server: GceServer) -> list[Any]:
    return [r for r in server.fake.requests if r.method == "POST" and r.path.endswith("/instances")]


# --- translate_error ---------------------------------------------------------------------------------
def _http(status: int, reason: str, message: str = "boom") -> gexc.GoogleAPICallError:
    return gexc.from_http_status(status, message, errors=[{"reason": reason, "message": message}])


def _op(code: str, status: int, op_type: str = "insert") -> OperationError:
    op = compute_v1.Operation(name="operation-1", status="DONE", operation_type=op_type,
                              http_error_status_code=status,
                              error=compute_v1.Error(errors=[compute_v1.Errors(code=code, message="m")]))
    return OperationError(op)


@pytest.mark.parametrize(
    ("exc", "expected", "code"),
    [
        (_op("ZONE_RESOURCE_POOL_EXHAUSTED", 503), InsufficientCapacityError, "ZONE_RESOURCE_POOL_EXHAUSTED"),
        (_op("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", 503), InsufficientCapacityError,
         "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"),
        (_op("SOMETHING_NEW", 503), InsufficientCapacityError, "SOMETHING_NEW"),   # 503 on an insert op
        (_op("SOMETHING_NEW", 503, "delete"), ProviderUnavailableError, "SOMETHING_NEW"),
        (_op("QUOTA_EXCEEDED", 403), QuotaExceededError, "QUOTA_EXCEEDED"),
        (_op("INVALID_FIELD_VALUE", 400), InvalidRequestError, "INVALID_FIELD_VALUE"),
        (_http(403, "quotaExceeded"), QuotaExceededError, "quotaExceeded"),
        (_http(403, "rateLimitExceeded"), RateLimitedError, "rateLimitExceeded"),
        (_http(429, "rateLimitExceeded"), RateLimitedError, "rateLimitExceeded"),
        (_http(429, ""), RateLimitedError, None),
        (_http(403, "userRateLimitExceeded"), RateLimitedError, "userRateLimitExceeded"),
        # An operation throttled for too many operations on one resource (e.g. one image in many zones):
        (_op("RESOURCE_OPERATION_RATE_EXCEEDED", 403), RateLimitedError, "RESOURCE_OPERATION_RATE_EXCEEDED"),
        (_http(401, "authError"), AuthError, "authError"),
        (_http(403, "forbidden"), AuthError, "forbidden"),
        (_http(404, "notFound"), InstanceNotFoundError, "notFound"),
        (_http(400, "invalid"), InvalidRequestError, "invalid"),
        (_http(409, "alreadyExists"), InvalidRequestError, "alreadyExists"),
        (_http(500, "backendError"), ProviderUnavailableError, "backendError"),
        (_http(503, "backendError"), ProviderUnavailableError, "backendError"),
        # Structured codes decide, never the message text:
        (_http(400, "invalid", "quota exceeded; resource pool exhausted"), InvalidRequestError, "invalid"),
    ],
)
def test_translate_error(exc: Exception, expected: type, code: str | None) -> None:
    out = translate_error(exc)
    assert type(out) is expected
    assert out.code == code
    assert out.provider == "gcp"


def test_translate_auth_and_transport_errors() -> None:
    out = translate_error(google.auth.exceptions.DefaultCredentialsError("no ADC"))
    assert isinstance(out, AuthError) and "gcloud auth application-default login" in (out.hint or "")
    assert isinstance(translate_error(requests.exceptions.ConnectionError("reset")), ProviderUnavailableError)
    with pytest.raises(KeyError):
        translate_error(KeyError("a bug is not a cloud error"))


# --- request shapes ----------------------------------------------------------------------------------
def test_machine_shape() -> None:
    assert machine_shape("n1-standard-8+4xT4") == ("n1-standard-8", "nvidia-tesla-t4", 4)
    assert machine_shape("n1-standard-8+8xV100") == ("n1-standard-8", "nvidia-tesla-v100", 8)
    assert machine_shape("a2-ultragpu-4g") == ("a2-ultragpu-4g", None, 0)
    with pytest.raises(InvalidRequestError):
        machine_shape("n1-standard-8+4xZZ9")


def test_n1_launch_attaches_accelerators(provider: GcpProvider, server: GceServer) -> None:
    inst = provider.launch(_spec("l0000000000a1", instance_type="n1-standard-8+4xT4"))
    (insert,) = _inserts(server)
    body = insert.body
    assert insert.path == f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances"
    assert body["machineType"] == f"zones/{ZONE}/machineTypes/n1-standard-8"
    assert body["guestAccelerators"] == [{"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4",
                                          "acceleratorCount": 4}]
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert inst.instance_type == "n1-standard-8+4xT4"      # reads back in the catalog's spelling
    assert inst.instance_id == f"{ZONE}/orch-alice-l0000000000a1"


def test_accelerator_optimized_launch_has_no_guest_accelerators(provider: GcpProvider, server: GceServer) -> None:
    inst = provider.launch(_spec("l0000000000a2", ssh_public_key="ssh-ed25519 AAAAKEY me",
                                 startup_script="#!/bin/sh\necho boot\n"))
    body = _inserts(server)[0].body
    assert body["machineType"] == f"zones/{ZONE}/machineTypes/g2-standard-24"
    assert "guestAccelerators" not in body
    assert body["labels"] == {LABEL_LAUNCH_ID: "l0000000000a2", LABEL_OWNER: "alice", LABEL_JOB: "train_llama-v2"}
    meta = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert meta["startup-script"] == "#!/bin/sh\necho boot\n"
    assert meta["ssh-keys"] == "root:ssh-ed25519 AAAAKEY me"
    assert body["scheduling"]["provisioningModel"] == "STANDARD"
    assert body["disks"][0]["boot"] is True and body["disks"][0]["initializeParams"]["diskSizeGb"] == "100"
    assert inst.market is Market.ON_DEMAND and inst.job == "train_llama-v2"


def test_the_jobs_container_image_is_never_sent_as_the_boot_image(provider: GcpProvider, server: GceServer) -> None:
    """``image:`` is the job's container (run by docker on the VM): GCE boots the configured machine image."""
    provider.launch(_spec("l0000000000a9", image="pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"))
    params = _inserts(server)[0].body["disks"][0]["initializeParams"]
    assert params["sourceImage"] == provider.settings.image
    assert params["sourceImage"].startswith("projects/deeplearning-platform-release/")


def test_region_maps_to_configured_zone(provider: GcpProvider, server: GceServer) -> None:
    inst = provider.launch(_spec("l0000000000a3", region="us-east1"))
    assert inst.zone == "us-east1-b" and inst.region == "us-east1"
    assert _inserts(server)[0].path.endswith("/zones/us-east1-b/instances")


def test_spot_scheduling_fields(provider: GcpProvider, server: GceServer) -> None:
    inst = provider.launch(_spec("l0000000000b1", Market.SPOT))
    sched = _inserts(server)[0].body["scheduling"]
    assert sched == {"provisioningModel": "SPOT", "instanceTerminationAction": "STOP",
                     "automaticRestart": False, "onHostMaintenance": "TERMINATE"}
    assert inst.market is Market.SPOT


def test_label_value() -> None:
    assert label_value("Train_Llama.v2") == "train_llama-v2"
    assert len(label_value("x" * 100)) == 63


# --- idempotency -------------------------------------------------------------------------------------
def test_request_id_is_a_deterministic_uuid() -> None:
    assert request_id("l0123456789ab") == request_id("l0123456789ab")
    assert request_id("l0123456789ab") != request_id("l0123456789ac")
    assert uuid.UUID(request_id("l0123456789ab")).version == 5


def test_retried_insert_reuses_the_request_id(provider: GcpProvider, server: GceServer) -> None:
    server.fake.inject("server-error", times=1)
    inst = provider.launch(_spec("l0000000000c1"))
    inserts = _inserts(server)
    assert len(inserts) == 2
    assert {r.query["requestId"] for r in inserts} == {request_id("l0000000000c1")}
    assert [i.instance_id for i in provider.list_instances("alice")] == [inst.instance_id]


def test_second_launch_finds_the_instance_by_name(provider: GcpProvider, server: GceServer) -> None:
    first = provider.launch(_spec("l0000000000c2"))
    second = provider.launch(_spec("l0000000000c2"))
    assert first.instance_id == second.instance_id
    assert len(_inserts(server)) == 1


def test_sdk_retry_is_off(server: GceServer) -> None:
    server.fake.reset()
    p = GcpProvider(_settings(server, retry_attempts=1))
    server.fake.inject("server-error", times=1)
    with pytest.raises(ProviderUnavailableError):
        p.launch(_spec("l0000000000c3"))
    assert len(_inserts(server)) == 1        # neither the SDK nor anything else tried again
    p.close()


# --- states and preemption ---------------------------------------------------------------------------
def test_preempted_spot_reads_preempted(provider: GcpProvider, server: GceServer) -> None:
    inst = provider.launch(_spec("l0000000000d1", Market.SPOT))
    server.fake.preempt(ZONE, "orch-alice-l0000000000d1")
    got = provider.get(inst.instance_id)
    assert got is not None
    assert (got.state, got.raw_state, got.raw_reason) == (InstanceState.PREEMPTED, "TERMINATED", PREEMPTED_OPERATION)
    ops = [r for r in server.fake.requests if r.path.endswith("/operations") and r.method == "GET"]
    assert 'operationType = "compute.instances.preempted"' in ops[-1].query["filter"]
    assert "orch-alice-l0000000000d1" in ops[-1].query["filter"]


def test_stopped_spot_without_preemption_is_stopped(provider: GcpProvider, server: GceServer) -> None:
    preempted = provider.launch(_spec("l0000000000d2", Market.SPOT))
    stopped = provider.launch(_spec("l0000000000d3", Market.SPOT))
    server.fake.preempt(ZONE, "orch-alice-l0000000000d2")   # another instance's preemption must not count
    provider.stop(stopped.instance_id)
    states = {i.instance_id: i.state for i in provider.list_instances("alice")}
    assert states[preempted.instance_id] is InstanceState.PREEMPTED
    assert states[stopped.instance_id] in (InstanceState.STOPPING, InstanceState.STOPPED)
    got = provider.get(stopped.instance_id)
    assert got is not None and got.state is InstanceState.STOPPED and got.raw_state == "TERMINATED"


def test_lifecycle_states_and_terminate(provider: GcpProvider) -> None:
    inst = provider.launch(_spec("l0000000000d4"))
    assert inst.state is InstanceState.PENDING and inst.raw_state in ("PROVISIONING", "STAGING")
    seen = {inst.raw_state}
    for _ in range(5):   # the fake moves one step per read; bounded
        got = provider.get(inst.instance_id)
        assert got is not None
        seen.add(got.raw_state)
        if got.state is InstanceState.RUNNING:
            break
    assert "RUNNING" in seen and got.public_ip and got.private_ip
    provider.terminate(inst.instance_id)
    provider.terminate(inst.instance_id)
    assert provider.get(inst.instance_id) is None
    provider.terminate(f"{ZONE}/orch-alice-l999999999999")
    assert provider.get("not-an-id") is None


def test_repairing_reads_unreachable_not_gone(provider: GcpProvider, server: GceServer) -> None:
    """compute.v1 discovery: REPAIRING "The instance is in repair": unusable now, may come back."""
    inst = provider.launch(_spec("l0000000000d5"))
    raw = server.fake.instance(ZONE, inst.instance_id.split("/")[1])
    assert raw is not None
    raw["status"] = "REPAIRING"
    got = provider.get(inst.instance_id)
    assert got is not None and got.state is InstanceState.UNREACHABLE and got.raw_state == "REPAIRING"
    assert not got.state.is_gone


def test_list_instances_spans_zones_and_filters_owner(provider: GcpProvider, server: GceServer) -> None:
    a = provider.launch(_spec("l0000000000e1"))
    b = provider.launch(_spec("l0000000000e2", region="us-east1"))
    other = LaunchSpec(launch_id="l0000000000e3", owner="bob", job="j", offer=catalog_offer(Market.ON_DEMAND))
    provider.launch(other)
    assert sorted(i.instance_id for i in provider.list_instances("alice")) == sorted([a.instance_id, b.instance_id])
    assert [i.owner for i in provider.list_instances("bob")] == ["bob"]
    agg = [r for r in server.fake.requests if r.path.endswith("/aggregated/instances")]
    assert agg[-1].query["filter"] == f'labels.{LABEL_OWNER} = "bob"'


# --- credentials and project -------------------------------------------------------------------------
def test_check_credentials_without_adc(server: GceServer, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_adc(**_: Any) -> Any:
        raise google.auth.exceptions.DefaultCredentialsError("Your default credentials were not found.")

    monkeypatch.setattr(google.auth, "default", no_adc)
    p = GcpProvider(_settings(server, anonymous_credentials=False))
    with pytest.raises(AuthError) as err:
        p.check_credentials()
    assert "GOOGLE_APPLICATION_CREDENTIALS" in (err.value.hint or "")


def test_project_is_resolved_lazily(server: GceServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    p = GcpProvider(_settings(server, project=None))        # building it looks nothing up
    with pytest.raises(AuthError) as err:
        p.check_credentials()
    assert "project" in str(err.value)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "from-env")
    q = GcpProvider(_settings(server, project=None))
    server.fake.reset()
    q.check_credentials()
    assert server.fake.requests[-1].path.startswith("/compute/v1/projects/from-env/")


def test_check_credentials_makes_one_cheap_call(provider: GcpProvider, server: GceServer) -> None:
    provider.check_credentials()
    assert server.fake.requests[-1].query.get("maxResults") == "1"


def test_settings_import_is_sdk_free() -> None:
    code = ("import sys, providers.gcp.settings as s; s.Settings(); "
            "bad = [m for m in sys.modules if m.startswith('google')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the firewall rules, the node's service account, leftovers ------------------------------------------
def _firewall_posts(server: GceServer) -> list[Any]:
    return [r for r in server.fake.requests if r.method == "POST" and r.path.endswith("/global/firewalls")]


def test_launch_opens_ssh_with_a_tagged_firewall_rule(server: GceServer) -> None:
    server.fake.reset()
    p = GcpProvider(_settings(server, ssh_ingress_cidrs=["203.0.113.7/32"]))
    a = p.launch(_spec("l0000000000f1"))
    p.launch(_spec("l0000000000f2"))
    rule = server.fake.firewall("orch-alice-ssh-default")
    assert rule is not None
    assert rule["sourceRanges"] == ["203.0.113.7/32"] and rule["targetTags"] == ["orch-alice"]
    assert rule["allowed"] == [{"IPProtocol": "tcp", "ports": ["22"]}] and rule["direction"] == "INGRESS"
    assert rule["network"].endswith("/global/networks/default")
    assert len(_firewall_posts(server)) == 2, "the SSH and intra rules created once, found on the next launch"
    inst = server.fake.instance(ZONE, a.instance_id.split("/")[1])
    assert inst is not None and inst["tags"]["items"] == ["orch-alice"]
    # The setting changes: the same rule is patched, not duplicated.
    GcpProvider(_settings(server, ssh_ingress_cidrs=["198.51.100.0/24"])).launch(_spec("l0000000000f3"))
    rule = server.fake.firewall("orch-alice-ssh-default")
    assert rule is not None and rule["sourceRanges"] == ["198.51.100.0/24"]
    assert len(_firewall_posts(server)) == 2
    p.close()


def test_ipv6_ranges_get_their_own_rule(server: GceServer) -> None:
    server.fake.reset()
    GcpProvider(_settings(server, ssh_ingress_cidrs=["203.0.113.0/24", "2001:db8::/32"])).launch(_spec("l0000000000f4"))
    v4, v6 = server.fake.firewall("orch-alice-ssh-default"), server.fake.firewall("orch-alice-ssh6-default")
    assert v4 is not None and v4["sourceRanges"] == ["203.0.113.0/24"]
    assert v6 is not None and v6["sourceRanges"] == ["2001:db8::/32"]


def test_default_launch_opens_no_port_to_anyone_and_lets_the_tag_talk(server: GceServer) -> None:
    """No ``ssh_ingress_cidrs``: the only rule orch makes admits its own tagged instances, on every
    protocol (a gang's rendezvous and NCCL), and no address range: nothing from 0.0.0.0/0."""
    server.fake.reset()
    settings = _settings(server)
    assert settings.ssh_ingress_cidrs == []
    p = GcpProvider(settings)
    p.launch(_spec("l0000000000f5"))
    posted = [r.body["name"] for r in _firewall_posts(server)]  # type: ignore[index]
    assert posted == ["orch-alice-intra-default"]
    assert [r.name for r in p.list_network_resources("alice")] == posted
    rule = server.fake.firewall(posted[0])
    assert rule is not None and rule["direction"] == "INGRESS"
    assert not rule.get("sourceRanges"), "no address range: nothing from outside the tag"
    assert rule["sourceTags"] == ["orch-alice"] and rule["targetTags"] == ["orch-alice"]
    assert rule["allowed"] == [{"IPProtocol": "all"}]


def test_firewall_rule_is_a_leftover_once_no_instance_is_on_its_network(server: GceServer) -> None:
    server.fake.reset()
    p = GcpProvider(_settings(server))
    inst = p.launch(_spec("l0000000000f6"))
    [rule] = p.list_network_resources("alice")
    assert (rule.kind, rule.resource_id, rule.owner, rule.in_use) == (
        ResourceKind.FIREWALL_RULE, "orch-alice-intra-default", "alice", True)
    assert rule.created_at is not None
    assert p.list_network_resources("bob") == []
    p.terminate(inst.instance_id)
    assert p.get(inst.instance_id) is None                  # the fake finishes the delete on the next read
    [rule] = p.list_network_resources("alice")
    assert not rule.in_use
    p.delete_network_resource(rule)
    assert server.fake.firewall(rule.name) is None
    p.delete_network_resource(rule)                          # missing == success
    assert p.list_network_resources("alice") == []


def test_service_account_gives_the_node_an_identity(server: GceServer) -> None:
    server.fake.reset()
    email = "orch-node@orch-test.iam.gserviceaccount.com"
    inst = GcpProvider(_settings(server, service_account=email)).launch(_spec("l0000000000f7"))
    raw = server.fake.instance(ZONE, inst.instance_id.split("/")[1])
    assert raw is not None
    assert raw["serviceAccounts"] == [{"email": email, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}]
    plain = GcpProvider(_settings(server)).launch(_spec("l0000000000f8"))
    raw = server.fake.instance(ZONE, plain.instance_id.split("/")[1])
    assert raw is not None and "serviceAccounts" not in raw


# --- published / recorded payloads (tests/fixtures/gcp/PROVENANCE.md) ------------------------------------
FIXTURES = Path(__file__).parent / "fixtures" / "gcp"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_recorded_instance_list_parses_and_validates() -> None:
    """apache/libcloud @ 10d9154b456dc55f05d1ff905beab10e4a9ac10f,
    libcloud/test/compute/fixtures/gce/zones_us-central1-a_instances.json (a recorded instances.list answer)."""
    import json

    from tests.test_gce_fake_contract import errors_for

    assert not errors_for("InstanceList", json.loads(_fixture("zones_us-central1-a_instances.json")))
    listing = compute_v1.InstanceList.from_json(_fixture("zones_us-central1-a_instances.json"),
                                                ignore_unknown_fields=True)
    p = GcpProvider(Settings(project=PROJECT, anonymous_credentials=True))
    [inst] = [p._to_instance(raw) for raw in listing.items]
    assert inst.instance_id == "us-central1-a/node-name" and inst.state is InstanceState.RUNNING
    assert (inst.public_ip, inst.private_ip) == ("23.236.58.15", "10.240.72.75")
    assert inst.instance_type == "n1-standard-1" and inst.region == "us-central1" and inst.market is Market.ON_DEMAND
    assert inst.created_at is not None and inst.created_at.year == 2013
    assert inst.owner is None and inst.launch_id is None, "not orch's: no orch labels"


def test_recorded_insert_operation_is_done() -> None:
    """apache/libcloud @ 7a0666ec80334538bd3944882f9f917a60dee590,
    libcloud/test/compute/fixtures/gce/operations_operation_zones_us-central1-a_instances_post.json."""
    import json

    from tests.test_gce_fake_contract import errors_for

    text = _fixture("operations_operation_zones_us-central1-a_instances_post.json")
    assert not errors_for("Operation", json.loads(text))
    op = compute_v1.Operation.from_json(text, ignore_unknown_fields=True)
    p = GcpProvider(Settings(project=PROJECT, anonymous_credentials=True))
    assert p._wait(ZONE, op) is op                            # DONE without error: nothing to wait for
    assert op.operation_type == "insert" and op.target_link.endswith("/instances/lcnode-001")


def test_recorded_firewall_list_parses_and_none_is_orchs() -> None:
    """apache/libcloud @ ac04f3631affa4c54c1df79ffe804c18619ede71,
    libcloud/test/compute/fixtures/gce/global_firewalls.json (a recorded firewalls.list answer)."""
    import json

    from providers.gcp import network as gnet
    from tests.test_gce_fake_contract import errors_for

    assert not errors_for("FirewallList", json.loads(_fixture("global_firewalls.json")))
    rules = list(compute_v1.FirewallList.from_json(_fixture("global_firewalls.json"), ignore_unknown_fields=True).items)
    assert [gnet.network_name(r.network) for r in rules][:2] == ["default", "default"]
    assert [r.allowed[0].ports for r in rules if r.name == "default-ssh"] == [["22"]]

    class Listing:
        def list(self, **_: Any) -> list[compute_v1.Firewall]:
            return rules

    def call(fn: Any) -> Any:
        return fn()

    fw = gnet.FirewallRules(Listing(), PROJECT, call=call, wait=lambda op: op,  # type: ignore[arg-type]
                            timeout_s=1)
    assert fw.owned("alice", []) == [], "a user's own SSH rule is not orch's: no orch-<owner> name and target tag"
    ours = compute_v1.Firewall(name="orch-alice-ssh-default", network=rules[1].network, target_tags=["orch-alice"],
                               creation_timestamp=rules[1].creation_timestamp)
    rules.append(ours)
    [found] = fw.owned("alice", [])
    assert found.resource_id == "orch-alice-ssh-default" and not found.in_use and found.created_at is not None


def test_an_ssh_rule_no_longer_configured_is_removed_at_the_next_launch(server: GceServer) -> None:
    """An older default opened 22 to 0.0.0.0/0: with ssh_ingress_cidrs now empty, the next launch closes it."""
    server.fake.reset()
    GcpProvider(_settings(server, ssh_ingress_cidrs=["0.0.0.0/0"])).launch(_spec("l0000000000e1"))
    assert server.fake.firewall("orch-alice-ssh-default") is not None
    GcpProvider(_settings(server)).launch(_spec("l0000000000e2"))
    assert server.fake.firewall("orch-alice-ssh-default") is None
    assert server.fake.firewall("orch-alice-intra-default") is not None


@pytest.mark.parametrize(("image", "job_disk", "rented"), [
    (None, 20, "50"),                                                       # the default family, held at 50 GB
    ("projects/debian-cloud/global/images/family/debian-12", 20, "20"),     # held at 10 GB: the job's 20
    ("projects/orch-test/global/images/my-boot-image", 20, "64"),           # by name, in the VM's project
    ("projects/nobody/global/images/unknown", 20, "20"),                    # not found: GCE's insert will say
])
def test_a_boot_disk_is_never_smaller_than_its_image(server: GceServer, image: str | None, job_disk: int,
                                                     rented: str) -> None:
    """GCE refuses a boot disk smaller than its image ("Requested disk size cannot be smaller than the image size",
    tests/fakes/gce.py): the job's disk_gb is the least it needs, so a smaller one rents the image's size."""
    server.fake.reset()
    server.fake.add_image("orch-test", "my-boot-image", 64)
    p = GcpProvider(_settings(server, **({"image": image} if image else {})))
    try:
        p.launch(_spec("l0000000000d2", disk_gb=job_disk))
    finally:
        p.close()
    assert server.fake.refusals == []
    assert _inserts(server)[0].body["disks"][0]["initializeParams"]["diskSizeGb"] == rented
    server.fake.reset()


def test_the_fake_refuses_a_boot_disk_smaller_than_its_image() -> None:
    from providers.gcp.settings import DEFAULT_IMAGE
    from tests.fakes.gce import GceFake

    fake = GceFake()
    body = {"name": "vm-1", "machineType": "zones/us-central1-a/machineTypes/e2-standard-2",
            "disks": [{"boot": True, "initializeParams": {"sourceImage": DEFAULT_IMAGE, "diskSizeGb": "20"}}]}
    status, answer = fake.handle("POST", "/compute/v1/projects/p/zones/us-central1-a/instances", {}, body)
    assert status == 400 and answer["error"]["errors"][0]["reason"] == "invalid"
    assert answer["error"]["message"] == ("Invalid value for field 'resource.disks[0].initializeParams.diskSizeGb': "
                                          "'20'. Requested disk size cannot be smaller than the image size (50 GB)")
    assert fake.instance("us-central1-a", "vm-1") is None
    body["disks"][0]["initializeParams"]["diskSizeGb"] = "50"
    assert fake.handle("POST", "/compute/v1/projects/p/zones/us-central1-a/instances", {}, body)[0] == 200


@pytest.mark.parametrize(("setting", "job_disk", "rented"), [(None, None, "100"), (250, None, "250"),
                                                              (250, 500, "500"), (None, 60, "60")])
def test_the_jobs_disk_wins_then_the_setting_then_100(server: GceServer, setting: int | None, job_disk: int | None,
                                                      rented: str) -> None:
    """One rule on every cloud (LaunchSpec.disk_size): the job's resources.disk_gb, else gcp.disk_gb, else 100 GB
    (the setting used to beat the job's own disk)."""
    server.fake.reset()
    p = GcpProvider(_settings(server, disk_gb=setting))
    try:
        p.launch(_spec("l0000000000d1", disk_gb=job_disk))
    finally:
        p.close()
    assert _inserts(server)[0].body["disks"][0]["initializeParams"]["diskSizeGb"] == rented
    server.fake.reset()
