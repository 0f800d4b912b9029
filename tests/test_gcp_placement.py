"""GCP multi-node: a gang in one compact placement policy (created once, tagged, deleted with the gang), the
GPUDirect-TCPX NICs on an A3 High gang, and the gang's nodes reaching each other by the firewall as the fake
evaluates it (tests/fakes/gce.py), with nothing open to the outside by default."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from providers.base import LaunchSpec, Market, ResourceKind
from providers.errors import InvalidRequestError, ResourceInUseError
from providers.fabric import Fabric
from providers.gcp.adapter import GcpProvider
from providers.gcp.placement import policy_name
from providers.gcp.settings import GpuNetwork, Settings
from tests.contract.harness_gcp import catalog_offer
from tests.fakes.gce import GceServer

PROJECT = "orch-test"
ZONE = "us-central1-a"
GANG = "j7-g0"
GPU_NETS = [GpuNetwork(network=f"global/networks/gpu-{i}", subnetwork=f"regions/us-central1/subnetworks/gpu-{i}")
            for i in range(4)]


@pytest.fixture(scope="module")
def server() -> Iterator[GceServer]:
    srv = GceServer().start()
    yield srv
    srv.stop()


def _provider(server: GceServer, **overrides: Any) -> GcpProvider:
    server.fake.reset()
    base: dict[str, Any] = dict(project=PROJECT, zones=[ZONE], api_endpoint=server.endpoint,
                                anonymous_credentials=True, retry_attempts=3, retry_initial_wait_s=0.001,
                                retry_max_wait_s=0.01, retry_deadline_s=600.0, operation_timeout_s=10.0)
    return GcpProvider(Settings(**(base | overrides)))


def _node(launch_id: str, instance_type: str = "g2-standard-24", gang: str = GANG) -> LaunchSpec:
    # The catalog's us-central1 row, renamed where needed (the shipped catalog lists A3 High elsewhere).
    offer = replace(catalog_offer(Market.ON_DEMAND, "g2-standard-24", "us-central1"), instance_type=instance_type)
    return LaunchSpec(launch_id=launch_id, owner="alice", job="two-node", offer=offer, gang=gang,
                      startup_script="#!/bin/sh\necho hi\n")


def _key(instance_id: str) -> tuple[str, str]:
    zone, _, name = instance_id.partition("/")
    return zone, name


def test_gang_in_one_compact_policy_that_goes_with_the_gang(server: GceServer) -> None:
    p = _provider(server)
    nodes = [p.launch(_node("l000000000a01")), p.launch(_node("l000000000a02"))]
    name = policy_name("alice", GANG)
    policy = server.fake.policy("us-central1", name)
    assert policy is not None and policy["groupPlacementPolicy"] == {"collocation": "COLLOCATED"}
    assert "launch=l000000000a01" in policy["description"], "tagged with the launch id of the node that made it"
    inserts = [r for r in server.fake.requests if r.method == "POST" and r.path.endswith("/resourcePolicies")]
    assert len(inserts) == 1, "the second node finds the gang's policy"
    for n in nodes:
        inst = server.fake.instance(*_key(n.instance_id))
        assert inst is not None and [u.rsplit("/", 1)[-1] for u in inst["resourcePolicies"]] == [name]
    assert not server.fake.refusals

    # Garbage collection: held while a node names it (GCE refuses the delete), gone after.
    [held] = [r for r in p.list_network_resources("alice") if r.kind is ResourceKind.PLACEMENT_GROUP]
    assert held.in_use and held.launch_id == "l000000000a01" and held.region == "us-central1"
    with pytest.raises(ResourceInUseError):
        p.delete_network_resource(held)
    for n in nodes:
        p.terminate(n.instance_id)
    [unused] = [r for r in p.list_network_resources("alice") if r.kind is ResourceKind.PLACEMENT_GROUP]
    assert not unused.in_use
    p.delete_network_resource(unused)
    assert server.fake.policy("us-central1", name) is None
    p.delete_network_resource(unused)                      # missing == success
    p.close()


def test_single_node_asks_for_no_policy(server: GceServer) -> None:
    p = _provider(server)
    inst = p.launch(_node("l000000000b01", gang=""))
    assert "resourcePolicies" not in (server.fake.instance(*_key(inst.instance_id)) or {})
    assert not [r for r in server.fake.requests if r.path.endswith("/resourcePolicies")]
    p.close()


def test_gang_nodes_reach_each_other_and_nothing_outside_reaches_them(server: GceServer) -> None:
    p = _provider(server)
    a, b = (_key(p.launch(_node(f"l000000000c0{i}")).instance_id) for i in (1, 2))
    for port in (29500, 22, 43117):                      # the rendezvous, SSH, an NCCL socket port
        assert server.fake.reachable(a, b, port) and server.fake.reachable(b, a, port)
    assert not server.fake.reachable_from("203.0.113.7", b, 22), "no SSH from outside unless configured"
    assert not server.fake.reachable_from("203.0.113.7", b, 29500)
    rules = [server.fake.firewall(n) for n in ("orch-alice-intra-default",)]
    assert all(r is not None and r["sourceTags"] == r["targetTags"] == ["orch-alice"] for r in rules)
    assert not any("0.0.0.0/0" in (fw.get("sourceRanges") or [])
                   for fw in (server.fake.firewall(n) for n in ("orch-alice-ssh-default",)) if fw)
    p.close()
    # Configured: SSH admitted from that range only.
    p = _provider(server, ssh_ingress_cidrs=["198.51.100.0/24"])
    c = _key(p.launch(_node("l000000000c03")).instance_id)
    assert server.fake.reachable_from("198.51.100.9", c, 22)
    assert not server.fake.reachable_from("203.0.113.7", c, 22)
    assert not server.fake.reachable_from("198.51.100.9", c, 29500)
    p.close()


def test_a3_high_gang_gets_the_tcpx_nics_and_its_gpu_networks_are_open_within(server: GceServer) -> None:
    p = _provider(server, gpu_networks=GPU_NETS)
    nodes = [p.launch(_node(f"l000000000d0{i}", "a3-highgpu-8g")) for i in (1, 2)]
    assert not server.fake.refusals
    for n in nodes:
        nics = (server.fake.instance(*_key(n.instance_id)) or {})["networkInterfaces"]
        assert [x["network"].rsplit("/", 1)[-1] for x in nics] == ["default", "gpu-0", "gpu-1", "gpu-2", "gpu-3"]
        assert all(x["nicType"] == "GVNIC" for x in nics)
        assert [bool(x.get("accessConfigs")) for x in nics] == [True, False, False, False, False]
        assert n.fabric is Fabric.GPUDIRECT_TCPX
    assert all(i.fabric is Fabric.GPUDIRECT_TCPX for i in p.list_instances("alice"))
    for i in range(4):   # each GPU network has orch's intra-tag rule: the nodes reach each other on it
        fw = server.fake.firewall(f"orch-alice-intra-gpu-{i}")
        assert fw is not None and fw["sourceTags"] == ["orch-alice"] and not fw.get("sourceRanges")
    a, b = (_key(n.instance_id) for n in nodes)
    assert server.fake.reachable(a, b, 50000)
    # One A3 High alone: no GPU NICs (TCPX helps only between machines), no fabric.
    single = p.launch(_node("l000000000d09", "a3-highgpu-8g", gang=""))
    assert len((server.fake.instance(*_key(single.instance_id)) or {})["networkInterfaces"]) == 1
    assert single.fabric is None
    p.close()


def test_a3_high_gang_without_gpu_networks_is_refused_before_anything_is_made(server: GceServer) -> None:
    p = _provider(server)
    with pytest.raises(InvalidRequestError, match="gpu_networks"):
        p.launch(_node("l000000000e01", "a3-highgpu-8g"))
    assert not [r for r in server.fake.requests if r.method == "POST"], "no policy, rule or VM made"
    p.close()


def test_the_fake_refuses_an_a3_with_a_nic_that_is_not_gvnic() -> None:
    from tests.fakes.gce_contract import check_instance_insert

    body = {"name": "x", "machineType": "zones/us-central1-a/machineTypes/a3-highgpu-8g",
            "networkInterfaces": [{"network": "global/networks/default"},
                                  {"network": "global/networks/gpu-0", "nicType": "GVNIC"}]}
    refusal = check_instance_insert(body)
    assert refusal is not None and "GVNIC" in refusal.message
    body["networkInterfaces"][0]["network"] = "global/networks/gpu-0"
    refusal = check_instance_insert(body)
    assert refusal is not None and "one network" in refusal.message


def test_plan_and_apply_say_up_front_that_an_a3_gang_needs_gpu_networks() -> None:
    """The launch would refuse it: the preflight (orch plan's warning, apply's "not launched") says why first."""
    from pathlib import Path

    from orchestrator.app.preflight import boot_check_for
    from orchestrator.config.file import OrchConfig
    from orchestrator.manifest.loader import parse_text
    from providers.fabric import setup_missing

    example = Path(__file__).parent.parent / "examples" / "torchrun-ddp.yaml"
    [(manifest, _)] = parse_text(example.read_text())
    a3 = _node("l000000000f01", "a3-highgpu-8g").offer
    check = boot_check_for(OrchConfig(owner="alice", provider_sections={"gcp": {"project": "p"}}), environ={})
    problem = check(manifest, a3)
    assert problem is not None and "providers.gcp.gpu_networks" in problem
    assert setup_missing("gcp", "a3-highgpu-8g", 2, Settings(gpu_networks=GPU_NETS)) is None
    assert setup_missing("gcp", "a3-highgpu-8g", 2, Settings(gpu_networks=GPU_NETS[:3])) is not None
    assert setup_missing("gcp", "a3-highgpu-8g", 2, None) is not None, "no settings name no networks"
    assert setup_missing("gcp", "a3-highgpu-8g", 1, Settings()) is None, "one node: no GPU NICs, nothing needed"
    assert setup_missing("gcp", "g2-standard-24", 2, Settings()) is None
    sections = {"gcp": {"project": "p", "gpu_networks": [g.model_dump() for g in GPU_NETS]}}
    named = boot_check_for(OrchConfig(owner="alice", provider_sections=sections), environ={})(manifest, a3)
    assert "gpu_networks" not in (named or ""), named      # (what else it lacks, the store's reach, is no fabric's)


def test_a_gcp_section_its_settings_refuse_is_said_by_the_boot_check_with_its_field() -> None:
    """A gang whose fabric needs the settings: a section they refuse is the check's problem, never read raw."""
    from pathlib import Path

    from orchestrator.app.preflight import boot_check_for
    from orchestrator.config.file import OrchConfig
    from orchestrator.manifest.loader import parse_text

    example = Path(__file__).parent.parent / "examples" / "torchrun-ddp.yaml"
    [(manifest, _)] = parse_text(example.read_text())
    a3 = _node("l000000000f01", "a3-highgpu-8g").offer
    bad = {"gcp": {"project": "p", "gpu_networks": [{"network": "n"}] * 4}}     # no subnetwork
    problem = boot_check_for(OrchConfig(owner="alice", provider_sections=bad), environ={})(manifest, a3)
    assert problem is not None and "gpu_networks" in problem and "subnetwork" in problem, problem


def test_launch_heals_a_policy_deleted_under_it(server: GceServer) -> None:
    """Garbage collection may delete an unused policy between the ensure and the insert: ensured again, once."""
    p = _provider(server)
    fake = server.fake
    original = fake.handle
    deleted = []

    def gc_in_between(method: str, path: str, query: dict[str, str], body: Any) -> Any:
        if method == "POST" and path.endswith("/instances") and not deleted:
            deleted.append(path)
            with fake._lock:
                fake._state.policies.clear()
        return original(method, path, query, body)

    fake.handle = gc_in_between  # type: ignore[method-assign]
    try:
        inst = p.launch(_node("l000000000g01"))
    finally:
        fake.handle = original  # type: ignore[method-assign]
    assert deleted and fake.policy("us-central1", policy_name("alice", GANG)) is not None
    raw = fake.instance(*_key(inst.instance_id)) or {}
    assert [u.rsplit("/", 1)[-1] for u in raw["resourcePolicies"]] == [policy_name("alice", GANG)]
    p.close()
