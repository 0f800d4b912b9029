"""Azure ND (InfiniBand) gangs: one availability set inside the gang's proximity placement group, the HPC image,
no zone, read back on the fabric; garbage collection removes the set, then the group. Against the fake ARM,
which holds every PUT body to the REST spec's shapes (tests/fakes/azure_contract.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("azure.mgmt.compute")

from providers.azure.adapter import AzureProvider
from providers.azure.settings import ImageRef
from providers.base import LaunchSpec, Market, ResourceKind
from providers.fabric import Fabric
from providers.retry import RetryPolicy
from tests.contract.harness_azure import RG, catalog_offer, make_settings
from tests.fakes.azure_arm import FakeArm

GANG = "j9-g1"
ND = "Standard_ND96asr_v4"


@pytest.fixture
def arm() -> Iterator[FakeArm]:
    fake = FakeArm()
    fake.serve()
    yield fake
    fake.close()


def _provider(arm: FakeArm, **kw: Any) -> AzureProvider:
    return AzureProvider(make_settings(arm.url, **kw), retry=RetryPolicy.fast())  # type: ignore[arg-type]


def _spec(rank: int, instance_type: str = ND, gang: str = GANG, zone: str | None = "1") -> LaunchSpec:
    offer = replace(catalog_offer(Market.ON_DEMAND), instance_type=instance_type, zone=zone)
    return LaunchSpec(launch_id=f"l0000000009{rank:02d}", owner="alice", job="big", offer=offer, node_rank=rank,
                      gang=gang, startup_script="#!/bin/sh\necho hi\n")


def _puts(arm: FakeArm, kind: str) -> int:
    return sum(1 for r in arm.requests if r.method == "PUT" and f"/{kind}/" in r.path)


def test_an_nd_gang_shares_one_availability_set_in_its_proximity_group(arm: FakeArm) -> None:
    custom = ImageRef(publisher="canonical", offer="ubuntu-24_04-lts", sku="server")
    p = _provider(arm, image=custom)
    nodes = [p.launch(_spec(r)) for r in (0, 1)]
    assert not arm.refusals, arm.refusals
    assert _puts(arm, "availabilitySets") == 1 and _puts(arm, "proximityPlacementGroups") == 1
    [avset] = arm.state.avsets.values()
    [ppg] = arm.state.ppgs.values()
    assert avset["name"] == f"orch-alice-{GANG}" and avset["sku"] == {"name": "Aligned"}
    assert avset["properties"]["proximityPlacementGroup"]["id"] == ppg["id"]
    for n in nodes:
        vm = arm.state.vms[(RG, n.instance_id)]
        props = vm["properties"]
        assert props["availabilitySet"]["id"] == avset["id"] and props["proximityPlacementGroup"]["id"] == ppg["id"]
        assert "zones" not in vm, "an availability set takes no zone"
        image = props["storageProfile"]["imageReference"]
        assert (image["publisher"], image["offer"]) == ("microsoft-dsvm", "ubuntu-hpc"), "the IB image, not image"
        assert n.fabric is Fabric.INFINIBAND
    assert all(i.fabric is Fabric.INFINIBAND for i in p.list_instances("alice"))

    # Garbage collection: the set while it holds VMs; the group while it holds the set.
    def listed() -> dict[ResourceKind, Any]:
        return {r.kind: r for r in p.list_network_resources("alice")
                if r.kind in (ResourceKind.AVAILABILITY_SET, ResourceKind.PLACEMENT_GROUP)}

    held = listed()
    assert held[ResourceKind.AVAILABILITY_SET].in_use and held[ResourceKind.PLACEMENT_GROUP].in_use
    for n in nodes:
        p.terminate(n.instance_id)
    for n in nodes:                                      # the fake finishes a delete on the next read
        p.get(n.instance_id)
    after = listed()
    assert not after[ResourceKind.AVAILABILITY_SET].in_use
    assert after[ResourceKind.PLACEMENT_GROUP].in_use, "the availability set still names the group"
    p.delete_network_resource(after[ResourceKind.AVAILABILITY_SET])
    assert not arm.state.avsets
    last = listed()
    assert ResourceKind.AVAILABILITY_SET not in last and not last[ResourceKind.PLACEMENT_GROUP].in_use
    p.delete_network_resource(last[ResourceKind.PLACEMENT_GROUP])
    assert not arm.state.ppgs
    p.close()


def test_one_nd_or_a_gang_without_infiniband_gets_no_availability_set(arm: FakeArm) -> None:
    p = _provider(arm)
    single = p.launch(_spec(0, gang=""))
    assert single.fabric is None and not arm.state.avsets and not arm.state.ppgs
    assert arm.state.vms[(RG, single.instance_id)].get("zones") == ["1"]
    gang = p.launch(_spec(1, instance_type="Standard_NC24ads_A100_v4"))
    assert gang.fabric is None and not arm.state.avsets and len(arm.state.ppgs) == 1
    p.close()


def test_the_fake_refuses_an_availability_set_with_a_zone(arm: FakeArm) -> None:
    """What ARM refuses, so a launch that sent both would fail here as it would on Azure."""
    p = _provider(arm)
    p.launch(_spec(0))
    [avset] = arm.state.avsets.values()
    vm = next(iter(arm.state.vms.values()))
    body = {"location": vm["location"], "zones": ["1"],
            "properties": {**{k: v for k, v in vm["properties"].items()
                              if k in ("hardwareProfile", "networkProfile")},
                           "availabilitySet": {"id": avset["id"]},
                           "proximityPlacementGroup": vm["properties"]["proximityPlacementGroup"]}}
    status, _, error = arm.handle("PUT", f"/subscriptions/{vm['id'].split('/')[2]}/resourceGroups/{RG}/providers/"
                                  "Microsoft.Compute/virtualMachines/other", {"api-version": ["2024-07-01"]},
                                  {"authorization": "Bearer t"}, body)
    assert status == 400 and "availability zone" in error["error"]["message"]
    p.close()
