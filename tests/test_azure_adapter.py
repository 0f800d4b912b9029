"""The Azure adapter through the real azure-mgmt clients against tests/fakes/azure_arm.py."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.mgmt.network")

from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError

from providers.azure.adapter import AzureProvider
from providers.azure.errors import translate_error
from providers.azure.instances import EVICTION_REASON, TAG_STOPPED, map_state, to_instance
from providers.azure.launch_resources import create_nic, ensure_public_ip, launch_tags
from providers.azure.settings import Settings
from providers.base import TAG_JOB, TAG_LAUNCH_ID, TAG_OWNER, InstanceState, LaunchSpec, Market, ResourceKind
from providers.errors import (
    AuthError,
    DiskBelowImageError,
    InstanceNotFoundError,
    InsufficientCapacityError,
    InvalidRequestError,
    PriceTooLowError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
    ResourceInUseError,
)
from providers.retry import RetryPolicy
from tests.contract.harness_azure import RG, SUB, SUBNET, catalog_offer, make_settings
from tests.fakes.azure_arm import FakeArm

OWNER = "alice"


@pytest.fixture(scope="module")
def _fake() -> Iterator[FakeArm]:
    fake = FakeArm()
    fake.serve()
    yield fake
    fake.close()


@pytest.fixture
def fake(_fake: FakeArm) -> Iterator[FakeArm]:
    _fake.reset()
    yield _fake
    _fake.reset()


@pytest.fixture
def provider(fake: FakeArm) -> Iterator[AzureProvider]:
    p = AzureProvider(make_settings(fake.url), retry=RetryPolicy.fast())  # type: ignore[arg-type]
    yield p
    p.close()


def spec(launch_id: str = "l0123456789ab", market: Market = Market.ON_DEMAND, **kw: Any) -> LaunchSpec:
    return LaunchSpec(launch_id=launch_id, owner=OWNER, job="train-7", offer=catalog_offer(market),
                      ssh_public_key="ssh-ed25519 AAAAC3Nza alice@laptop", startup_script="#!/bin/sh\necho hi\n",
                      disk_gb=256, **kw)


def puts(fake: FakeArm, kind: str) -> list[Any]:
    return [r for r in fake.requests if r.method == "PUT" and f"/{kind}/" in r.path]


# -- translate_error -------------------------------------------------------------------------------


class _Resp:
    """The little of an azure-core HttpResponse that HttpResponseError reads."""

    def __init__(self, status: int, body: dict[str, Any] | None) -> None:
        self.status_code = status
        self.reason = "reason"
        self._text = json.dumps(body) if body is not None else ""
        self.headers: dict[str, str] = {}

    def text(self) -> str:
        return self._text


def http_error(status: int, code: str | None, message: str | None = None, target: str | None = None
               ) -> HttpResponseError:
    error = {"code": code, "message": message or f"{code} happened", **({"target": target} if target else {})}
    return HttpResponseError(response=_Resp(status, {"error": error} if code else None))  # type: ignore[arg-type]


@pytest.mark.parametrize(("message", "target", "expected"), [
    # ARM's quota refusals come as OperationNotAllowed, in words naming the quota.
    ("Operation could not be completed as it results in exceeding approved standardNCADSA100v4Family Cores quota.",
     None, QuotaExceededError),
    ("Operation results in exceeding quota limits of Core. Maximum allowed: 4, Current in use: 4.", None,
     QuotaExceededError),
    # The same code for an OS disk under its image's: not quota (orch's fix for quota would be wrong), typed.
    ("The specified disk size 20 GB is smaller than the size of the corresponding disk in the VM image: 30 GB. This "
     "is not allowed. Please choose equal or greater size or do not specify an explicit size.", "osDisk.diskSizeGB",
     DiskBelowImageError),
    ("Operation 'start' is not allowed on VM 'x' since the VM is marked for deletion.", None, InvalidRequestError),
])
def test_operation_not_allowed_is_quota_only_when_it_says_quota(message: str, target: str | None,
                                                                 expected: type) -> None:
    err = translate_error(http_error(409, "OperationNotAllowed", message, target))
    assert type(err) is expected and err.code == "OperationNotAllowed" and err.message == message


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (409, "SkuNotAvailable", InsufficientCapacityError),
        (200, "AllocationFailed", InsufficientCapacityError),
        (200, "ZonalAllocationFailed", InsufficientCapacityError),
        (409, "OverconstrainedAllocationRequest", InsufficientCapacityError),
        (409, "QuotaExceeded", QuotaExceededError),
        (400, "SpotPriceGreaterThanProvidedMaxPrice", PriceTooLowError),
        (200, "SpotPriceGreaterThanProvidedMaxPrice", PriceTooLowError),   # as a failed LRO
        (429, "TooManyRequests", RateLimitedError),
        (429, None, RateLimitedError),
        (401, "InvalidAuthenticationToken", AuthError),
        (403, "AuthorizationFailed", AuthError),
        (404, "ResourceNotFound", InstanceNotFoundError),
        (404, None, InstanceNotFoundError),
        (400, "InvalidParameter", InvalidRequestError),
        (400, None, InvalidRequestError),
        (500, "InternalServerError", ProviderUnavailableError),
        (503, None, ProviderUnavailableError),
        (400, "InUseNetworkSecurityGroupCannotBeDeleted", ResourceInUseError),
        (400, "PublicIPAddressCannotBeDeleted", ResourceInUseError),
        (400, "NicInUse", ResourceInUseError),
    ],
)
def test_translate_error_table(status: int, code: str | None, expected: type) -> None:
    err = translate_error(http_error(status, code))
    assert type(err) is expected
    assert err.provider == "azure"
    assert err.code == (code or str(status))


def test_translate_auth_and_transport_errors() -> None:
    auth = translate_error(ClientAuthenticationError("no token"))
    assert isinstance(auth, AuthError) and auth.hint and "az login" in auth.hint
    assert isinstance(translate_error(ServiceRequestError("connection refused")), ProviderUnavailableError)
    assert translate_error(ServiceRequestError("x")).retryable


# -- state mapping ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prov", "power", "spot", "stopped", "expected"),
    [
        ("Creating", None, False, False, InstanceState.PENDING),
        ("Creating", "starting", True, False, InstanceState.PENDING),
        ("Succeeded", "running", False, False, InstanceState.RUNNING),
        ("Succeeded", "stopping", False, False, InstanceState.STOPPING),
        ("Succeeded", "deallocating", True, False, InstanceState.STOPPING),
        ("Succeeded", "stopped", False, False, InstanceState.STOPPED),
        ("Succeeded", "deallocated", False, False, InstanceState.STOPPED),
        ("Succeeded", "deallocated", True, False, InstanceState.PREEMPTED),
        ("Succeeded", "deallocated", True, True, InstanceState.STOPPED),
        ("Deleting", "stopping", False, False, InstanceState.STOPPING),
        ("Failed", None, False, False, InstanceState.TERMINATED),
        # Azure's documented "PowerState/unknown" (the platform lost the VM's state): not gone, may come back.
        ("Succeeded", "unknown", True, False, InstanceState.UNREACHABLE),
    ],
)
def test_map_state(prov: str, power: str | None, spot: bool, stopped: bool, expected: InstanceState) -> None:
    state, raw_state, reason = map_state(prov, power, spot=spot, stopped_by_orch=stopped)
    assert state is expected
    assert raw_state
    assert (reason == EVICTION_REASON) == (expected is InstanceState.PREEMPTED)


# -- what is sent ----------------------------------------------------------------------------------


def test_vm_body_spot_tags_customdata_and_nic(fake: FakeArm, provider: AzureProvider) -> None:
    s = spec(market=Market.SPOT, max_price_hr=1.25)
    inst = provider.launch(s)
    assert inst.instance_id == s.name and inst.market is Market.SPOT and inst.private_ip

    (nic_put,) = puts(fake, "networkInterfaces")
    assert nic_put.path.endswith(f"/resourceGroups/{RG}/providers/Microsoft.Network/networkInterfaces/{s.name}-nic")
    assert nic_put.body["tags"] == {TAG_LAUNCH_ID: s.launch_id, TAG_OWNER: OWNER, TAG_JOB: "train-7"}
    assert nic_put.body["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"] == SUBNET

    (vm_put,) = puts(fake, "virtualMachines")
    body = vm_put.body
    props = body["properties"]
    assert vm_put.path.endswith(f"/virtualMachines/{s.name}") and "api-version" in vm_put.query
    assert body["location"] == "eastus"
    assert body["tags"] == {TAG_LAUNCH_ID: s.launch_id, TAG_OWNER: OWNER, TAG_JOB: "train-7"}
    assert props["hardwareProfile"]["vmSize"] == "Standard_NC24ads_A100_v4"
    assert props["priority"] == "Spot" and props["evictionPolicy"] == "Deallocate"
    assert props["billingProfile"]["maxPrice"] == 1.25
    os_profile = props["osProfile"]
    assert base64.b64decode(os_profile["customData"]).decode() == s.startup_script
    assert os_profile["adminUsername"] == "orch" and os_profile["computerName"] == s.name
    linux = os_profile["linuxConfiguration"]
    assert linux["disablePasswordAuthentication"] is True
    assert linux["ssh"]["publicKeys"] == [{"path": "/home/orch/.ssh/authorized_keys", "keyData": s.ssh_public_key}]
    os_disk = props["storageProfile"]["osDisk"]
    assert os_disk["diskSizeGB"] == 256 and os_disk["name"] == f"{s.name}-osdisk"
    assert os_disk["deleteOption"] == "Delete"
    assert props["storageProfile"]["imageReference"]["publisher"] == "microsoft-dsvm"
    (nic_ref,) = props["networkProfile"]["networkInterfaces"]
    assert nic_ref["id"].endswith(f"/networkInterfaces/{s.name}-nic")
    assert nic_ref["properties"] == {"primary": True, "deleteOption": "Delete"}
    # the bearer header reached the fake over plain http
    assert vm_put.headers["authorization"] == "Bearer fake-token"


def test_on_demand_body_has_no_spot_fields_and_spot_defaults_to_on_demand_cap(
        fake: FakeArm, provider: AzureProvider) -> None:
    provider.launch(spec("l00000000000a"))
    provider.launch(spec("l00000000000b", Market.SPOT))
    on_demand, spot = (r.body["properties"] for r in puts(fake, "virtualMachines"))
    assert not {"priority", "evictionPolicy", "billingProfile"} & set(on_demand)
    assert spot["billingProfile"] == {"maxPrice": -1}


def test_launch_is_idempotent_without_a_second_put(fake: FakeArm, provider: AzureProvider) -> None:
    s = spec()
    first = provider.launch(s)
    second = provider.launch(s)
    assert first.instance_id == second.instance_id
    assert len(puts(fake, "virtualMachines")) == 1 and len(puts(fake, "networkInterfaces")) == 1


# -- terminate and cleanup -------------------------------------------------------------------------


def test_terminate_removes_vm_nic_public_ip_and_disk(fake: FakeArm, provider: AzureProvider) -> None:
    s = spec()
    provider.launch(s)
    assert fake.state.nics and fake.state.disks and fake.state.pips
    provider.terminate(s.name)
    assert provider.get(s.name) is None
    assert not fake.state.vms and not fake.state.nics and not fake.state.disks and not fake.state.pips
    # The shared SSH NSG stays for the owner's next VM; nothing holds it now (garbage collection's call).
    [nsg] = fake.state.nsgs.values()
    assert not nsg["properties"].get("networkInterfaces")
    provider.terminate(s.name)  # missing == success


def test_terminate_deletes_an_orphaned_nic(fake: FakeArm, provider: AzureProvider) -> None:
    s = spec()
    pip = ensure_public_ip(provider.arm, s, launch_tags(s))  # a launch that died between the NIC and the VM
    create_nic(provider.arm, s, launch_tags(s), public_ip_id=pip.id, nsg_id=None)
    assert [k[1] for k in fake.state.nics] == [f"{s.name}-nic"]
    provider.terminate(s.name)
    assert not fake.state.nics and not fake.state.pips
    assert any(r.method == "DELETE" and r.path.endswith(f"/networkInterfaces/{s.name}-nic") for r in fake.requests)


def test_capacity_refused_at_once_leaves_nothing(fake: FakeArm, provider: AzureProvider) -> None:
    fake.inject("capacity")
    with pytest.raises(InsufficientCapacityError) as info:
        provider.launch(spec())
    assert info.value.code == "SkuNotAvailable"
    assert not fake.state.vms and not fake.state.nics
    assert len(puts(fake, "virtualMachines")) == 1  # capacity is not retried in place


def test_allocation_failure_inside_the_lro(fake: FakeArm, provider: AzureProvider) -> None:
    fake.inject("capacity-lro")
    with pytest.raises(InsufficientCapacityError) as info:
        provider.launch(spec())
    assert info.value.code == "AllocationFailed"
    assert not fake.state.vms and not fake.state.nics and not fake.state.disks and not fake.state.pips


def test_quota(fake: FakeArm, provider: AzureProvider) -> None:
    fake.inject("quota")
    with pytest.raises(QuotaExceededError):
        provider.launch(spec())


def test_sdk_retries_are_off_and_ours_are_bounded(fake: FakeArm, provider: AzureProvider) -> None:
    fake.inject("server-error", times=100, ops=frozenset({"vm.get"}))
    with pytest.raises(ProviderUnavailableError):
        provider.get("orch-alice-l0123456789ab")
    # Only this VM's GETs: an earlier test's un-awaited NIC/disk delete pollers (azure-core polls them in
    # background threads) may still GET their operation status into this test's record.
    gets = [r for r in fake.requests
            if r.method == "GET" and r.path.endswith("/virtualMachines/orch-alice-l0123456789ab")]
    assert len(gets) == RetryPolicy.fast().attempts


def test_throttle_is_rate_limited_after_retries(fake: FakeArm, provider: AzureProvider) -> None:
    fake.inject("throttle", times=100)
    with pytest.raises(RateLimitedError):
        provider.list_instances(OWNER)
    assert len(fake.requests) == RetryPolicy.fast().attempts


def test_slow_server_times_out_as_unavailable(fake: FakeArm) -> None:
    p = AzureProvider(make_settings(fake.url, read_timeout_s=0.05),  # type: ignore[arg-type]
                      retry=RetryPolicy(attempts=2, initial_wait_s=0.001, max_wait_s=0.001, deadline_s=5))
    fake.slow(120)          # every answer held until slow(0): the client's timeout is the only way out
    try:
        with pytest.raises(ProviderUnavailableError):
            p.get("orch-alice-l0123456789ab")
    finally:
        fake.slow(0)
        p.close()


# -- reading state ---------------------------------------------------------------------------------


def test_eviction_reads_preempted_and_orch_stop_reads_stopped(fake: FakeArm, provider: AzureProvider) -> None:
    evicted, stopped = spec("l0000000000e1", Market.SPOT), spec("l0000000000e2", Market.SPOT)
    provider.launch(evicted)
    provider.launch(stopped)
    fake.evict(evicted.name)
    got = provider.get(evicted.name)
    assert got is not None and got.state is InstanceState.PREEMPTED
    assert got.raw_reason == EVICTION_REASON and got.raw_state == "PowerState/deallocated"

    provider.stop(stopped.name)
    got = _poll(lambda: provider.get(stopped.name), lambda i: i is not None and i.state is InstanceState.STOPPED)
    assert got is not None and got.raw_state == "PowerState/deallocated" and got.raw_reason is None
    vm = fake.state.vms[(RG, stopped.name)]
    assert TAG_STOPPED in vm["tags"] and vm["tags"][TAG_LAUNCH_ID] == stopped.launch_id


def test_simulate_eviction_api(fake: FakeArm, provider: AzureProvider) -> None:
    s = spec(market=Market.SPOT)
    provider.launch(s)
    provider.arm.compute().virtual_machines.simulate_eviction(RG, s.name)
    got = provider.get(s.name)
    assert got is not None and got.state is InstanceState.PREEMPTED


def test_list_instances_filters_by_owner_across_pages(fake: FakeArm, provider: AzureProvider) -> None:
    fake.state.page_size = 1
    mine = [spec(f"l00000000000{i}") for i in range(3)]
    for s in mine:
        provider.launch(s)
    other = LaunchSpec(launch_id="l0000000000ff", owner="bob", job="j", offer=catalog_offer(Market.ON_DEMAND))
    provider.launch(other)
    listed = provider.list_instances(OWNER)
    assert sorted(i.instance_id for i in listed) == sorted(s.name for s in mine)
    assert all(i.owner == OWNER and i.state is InstanceState.RUNNING and i.private_ip for i in listed)
    assert [i.instance_id for i in provider.list_instances("bob")] == [other.name]


# -- credentials and settings ----------------------------------------------------------------------


def test_check_credentials(fake: FakeArm) -> None:
    with pytest.raises(AuthError) as info:
        AzureProvider(Settings(subscription_id=None, resource_group=RG)).check_credentials()
    assert info.value.hint and "AZURE_SUBSCRIPTION_ID" in info.value.hint
    with pytest.raises(AuthError) as info:
        AzureProvider(Settings(subscription_id=SUB, resource_group=None)).check_credentials()
    assert info.value.hint and "resource_group" in info.value.hint

    class Broken:
        def get_token(self, *scopes: str, **kw: Any) -> Any:
            raise ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token")

    p = AzureProvider(make_settings(fake.url), retry=RetryPolicy.fast(), credential=Broken())  # type: ignore[arg-type]
    with pytest.raises(AuthError) as info:
        p.check_credentials()
    assert info.value.hint and "az login" in info.value.hint

    ok = AzureProvider(make_settings(fake.url), retry=RetryPolicy.fast())  # type: ignore[arg-type]
    ok.check_credentials()
    fake.inject("auth", times=100)
    with pytest.raises(AuthError):
        ok.check_credentials()
    ok.close()


def test_settings_do_not_import_the_sdk_and_hide_the_token() -> None:
    code = ("import sys, providers.azure.settings as s; "
            "assert not [m for m in sys.modules if m.startswith('azure')], 'azure imported'; "
            "x = s.Settings(static_token='sekrit'); "
            "assert 'sekrit' not in repr(x) and 'sekrit' not in str(x.model_dump())")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the fake itself -------------------------------------------------------------------------------


def test_fake_demands_a_bearer_token_and_speaks_arm_errors(fake: FakeArm) -> None:
    url = f"{fake.url}/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachines/x"
    r = httpx.get(url, params={"api-version": "2026-04-01"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "AuthenticationFailed"
    r = httpx.get(url, params={"api-version": "2026-04-01"}, headers={"Authorization": "Bearer t"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "ResourceNotFound"


def test_fake_runs_standalone() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.azure_arm", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        reply = _poll(lambda: _try_post(f"{base}/_fake/reset"), lambda r: r is not None)
        assert reply is not None and reply.json() == {"ok": True}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _try_post(url: str) -> httpx.Response | None:
    try:
        return httpx.post(url, json={})
    except httpx.TransportError:
        return None


def _poll(fn: Any, ok: Any, deadline_s: float = 60.0) -> Any:
    end = time.monotonic() + deadline_s
    value = fn()
    while not ok(value) and time.monotonic() < end:
        time.sleep(0.02)
        value = fn()
    return value


# -- the network for SSH, the node's identity, leftovers -------------------------------------------


def _provider(fake: FakeArm, **overrides: Any) -> AzureProvider:
    return AzureProvider(make_settings(fake.url, **overrides), retry=RetryPolicy.fast())  # type: ignore[arg-type]


def test_vm_nic_carries_a_standard_public_ip_and_an_nsg_rule_for_22(fake: FakeArm) -> None:
    p = _provider(fake, ssh_ingress_cidrs=["203.0.113.7/32"])
    s = spec()
    inst = p.launch(s)
    [nic] = fake.state.nics.values()
    [pip] = fake.state.pips.values()
    [nsg] = fake.state.nsgs.values()
    assert nic["name"] == f"{s.name}-nic" and pip["name"] == f"{s.name}-pip"
    assert nic["properties"]["ipConfigurations"][0]["properties"]["publicIPAddress"]["id"] == pip["id"]
    assert nic["properties"]["networkSecurityGroup"]["id"] == nsg["id"]
    assert pip["sku"]["name"] == "Standard" and pip["properties"]["publicIPAllocationMethod"] == "Static"
    assert pip["tags"] == {TAG_LAUNCH_ID: s.launch_id, TAG_OWNER: OWNER, TAG_JOB: "train-7"}
    assert nsg["name"] == f"orch-{OWNER}-ssh-eastus" and nsg["tags"][TAG_OWNER] == OWNER
    [rule] = [r for r in nsg["properties"]["securityRules"] if r["name"] == "orch-ssh"]
    rp = rule["properties"]
    assert (rp["direction"], rp["access"], rp["protocol"], rp["destinationPortRange"]) == (
        "Inbound", "Allow", "Tcp", "22")
    assert rp["sourceAddressPrefixes"] == ["203.0.113.7/32"]
    assert inst.public_ip == pip["properties"]["ipAddress"] and inst.private_ip
    assert {i.instance_id: i.public_ip for i in p.list_instances(OWNER)} == {s.name: inst.public_ip}
    p.close()


def test_the_nsg_is_shared_per_region_and_follows_the_setting(fake: FakeArm) -> None:
    p = _provider(fake, ssh_ingress_cidrs=["203.0.113.7/32"])
    p.launch(spec("l00000000000a"))
    p.launch(spec("l00000000000b"))
    assert len(puts(fake, "networkSecurityGroups")) == 1, "found with the right rules: no second PUT"
    [nsg] = fake.state.nsgs.values()
    assert len(nsg["properties"]["networkInterfaces"]) == 2
    _provider(fake, ssh_ingress_cidrs=["198.51.100.0/24", "2001:db8::/32"]).launch(spec("l00000000000c"))
    [nsg] = fake.state.nsgs.values()
    rules = {r["name"]: r["properties"].get("sourceAddressPrefixes") for r in nsg["properties"]["securityRules"]}
    assert rules == {"orch-intra": None, "orch-ssh": ["198.51.100.0/24"], "orch-ssh-v6": ["2001:db8::/32"]}
    assert len(nsg["properties"]["networkInterfaces"]) == 3, "an update keeps the NICs that use it"


def test_public_ip_false_creates_neither_address_nor_nsg(fake: FakeArm) -> None:
    inst = _provider(fake, public_ip=False).launch(spec())
    assert not fake.state.pips and not fake.state.nsgs
    [nic] = fake.state.nics.values()
    assert "publicIPAddress" not in nic["properties"]["ipConfigurations"][0]["properties"]
    assert "networkSecurityGroup" not in nic["properties"]
    assert inst.public_ip is None and inst.private_ip


def test_default_launch_opens_no_port_to_anyone_and_lets_the_network_talk(fake: FakeArm) -> None:
    """No ``ssh_ingress_cidrs``: the VM has an address, and its NSG admits the virtual network on every port
    (a gang's rendezvous and NCCL) and no range from outside: no rule names 0.0.0.0/0, Internet or *."""
    p = _provider(fake)
    assert p.settings.ssh_ingress_cidrs == []
    p.launch(spec())
    assert fake.state.pips
    [nsg] = fake.state.nsgs.values()
    [rule] = nsg["properties"]["securityRules"]
    rp = rule["properties"]
    assert (rule["name"], rp["direction"], rp["access"], rp["protocol"], rp["destinationPortRange"]) == (
        "orch-intra", "Inbound", "Allow", "*", "*")
    assert (rp["sourceAddressPrefix"], rp["destinationAddressPrefix"]) == ("VirtualNetwork", "VirtualNetwork")
    outside = {"0.0.0.0/0", "::/0", "*", "Internet", "Any"}
    for r in nsg["properties"]["securityRules"]:
        sources = {r["properties"].get("sourceAddressPrefix")} | set(r["properties"].get("sourceAddressPrefixes") or [])
        assert not sources & outside, r
    [nic] = fake.state.nics.values()
    assert nic["properties"]["networkSecurityGroup"]["id"] == nsg["id"]


def test_network_leftovers_are_listed_and_deleted(fake: FakeArm, provider: AzureProvider) -> None:
    s = spec()
    provider.launch(s)
    listed = {r.kind: r for r in provider.list_network_resources(OWNER)}
    assert set(listed) == {ResourceKind.PUBLIC_IP, ResourceKind.NETWORK_SECURITY_GROUP, ResourceKind.NETWORK_INTERFACE}
    assert all(r.in_use and r.owner == OWNER for r in listed.values())
    assert listed[ResourceKind.PUBLIC_IP].launch_id == s.launch_id
    assert provider.list_network_resources("someone-else") == []
    nsg = listed[ResourceKind.NETWORK_SECURITY_GROUP]
    with pytest.raises(ResourceInUseError):
        provider.delete_network_resource(nsg)          # ARM refuses while a NIC uses it
    provider.terminate(s.name)
    [left] = provider.list_network_resources(OWNER)
    assert left.kind is ResourceKind.NETWORK_SECURITY_GROUP and not left.in_use
    provider.delete_network_resource(left)
    assert not fake.state.nsgs
    provider.delete_network_resource(left)             # missing == success
    assert provider.list_network_resources(OWNER) == []


def test_a_half_done_launch_leaves_collectable_pieces(fake: FakeArm, provider: AzureProvider) -> None:
    s = spec()
    pip = ensure_public_ip(provider.arm, s, launch_tags(s))   # died between the NIC and the VM
    create_nic(provider.arm, s, launch_tags(s), public_ip_id=pip.id, nsg_id=None)
    found = {r.kind: r for r in provider.list_network_resources(OWNER)}
    assert not found[ResourceKind.NETWORK_INTERFACE].in_use and found[ResourceKind.PUBLIC_IP].in_use
    with pytest.raises(ResourceInUseError):
        provider.delete_network_resource(found[ResourceKind.PUBLIC_IP])
    provider.delete_network_resource(found[ResourceKind.NETWORK_INTERFACE])
    [pip_left] = provider.list_network_resources(OWNER)
    assert pip_left.kind is ResourceKind.PUBLIC_IP and not pip_left.in_use
    provider.delete_network_resource(pip_left)
    assert not fake.state.pips and not fake.state.nics


def test_system_assigned_identity(fake: FakeArm) -> None:
    _provider(fake, managed_identity="system").launch(spec())
    (vm_put,) = puts(fake, "virtualMachines")
    assert vm_put.body["identity"] == {"type": "SystemAssigned"}
    [vm] = fake.vms()
    assert vm["identity"]["principalId"]


def test_user_assigned_identity(fake: FakeArm) -> None:
    uid = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/orch"
    _provider(fake, managed_identity=uid).launch(spec())
    (vm_put,) = puts(fake, "virtualMachines")
    assert vm_put.body["identity"] == {"type": "UserAssigned", "userAssignedIdentities": {uid: {}}}
    [vm] = fake.vms()
    assert vm["identity"]["userAssignedIdentities"][uid]["clientId"]


def test_no_identity_unless_asked_and_bad_ones_refused(fake: FakeArm, provider: AzureProvider) -> None:
    from pydantic import ValidationError

    provider.launch(spec())
    (vm_put,) = puts(fake, "virtualMachines")
    assert "identity" not in vm_put.body
    with pytest.raises(ValidationError, match="managed_identity"):
        make_settings(fake.url, managed_identity="my-identity")


# -- Azure's published REST API examples (tests/fixtures/azure/PROVENANCE.md) ----------------------------------
FIXTURES = Path(__file__).parent / "fixtures" / "azure"


def _example(name: str, status: str = "200") -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / name).read_text())["responses"][status]["body"]
    return body


def test_published_vm_get_and_instance_view_parse(fake: FakeArm) -> None:
    """Azure/azure-rest-api-specs, Microsoft.Compute/ComputeRP/stable/2024-07-01 examples:
    VirtualMachine_Get.json @ 3873f33d7b91f28c55d7c98b6eb7da8aa5a5bda4 and
    VirtualMachine_Get_InstanceView.json @ ba16d1ab3479ee43b0db0da3dbc19cc2306a221e."""
    from azure.mgmt.compute import models as cm

    vm = cm.VirtualMachine(_example("VirtualMachine_Get.json"))
    view = cm.VirtualMachineInstanceView(_example("VirtualMachine_Get_InstanceView.json"))
    p = _provider(fake)
    inst = to_instance(vm, view, resource_group=p.arm.rg, ssh_user=p.settings.admin_username, private_ip="172.20.2.4",
                       public_ip=None)
    assert inst.instance_id == "myVM" and inst.state is InstanceState.RUNNING and inst.raw_state == "PowerState/running"
    assert inst.instance_type == "Standard_DS3_v2" and inst.region == "West US" and inst.market is Market.ON_DEMAND
    assert inst.created_at is not None and inst.created_at.year == 2021
    assert ("vm_id", "0f47b100-583c-48e3-a4c0-aefc2c9bbcc1") in inst.extra
    assert inst.launch_id is None and inst.owner is None, "tags myTag1 only: not orch's"


def test_published_nic_public_ip_and_nsg_parse() -> None:
    """Azure/azure-rest-api-specs, Microsoft.Network/stable/2024-05-01 examples: NetworkInterfaceGet.json
    @ 256831647a1e8b4c740895b99998b257c0b31b28, PublicIpAddressGet.json @ 014a10d49d64d9557ad49d88498ad08e978f607b,
    PublicIpAddressCreateCustomizedValues.json @ ea83a2a3e90ca3f0420e9d0ef55a811523541aba,
    NetworkSecurityGroupGet.json @ ac19a0454128affbd3ec320da4c5f44ac4610d5a."""
    from azure.mgmt.network import models as nm

    from providers.azure import network as anet

    nic = nm.NetworkInterface(_example("NetworkInterfaceGet.json"))
    pip = nm.PublicIPAddress(_example("PublicIpAddressGet.json"))
    static = nm.PublicIPAddress(_example("PublicIpAddressCreateCustomizedValues.json"))
    nsg = nm.NetworkSecurityGroup(_example("NetworkSecurityGroupGet.json"))
    assert anet.first_private_ip(nic) == "172.20.2.4"
    assert static.sku is not None and static.sku.name == "Standard"
    assert static.properties is not None and static.properties.public_ip_allocation_method == "Static"
    assert not anet.nsg_admits(nsg, ["0.0.0.0/0"]), "rule1 (port 80) is not orch's SSH rule"
    assert anet.owned_resources(OWNER, pips=[pip], nsgs=[nsg], nics=[nic]) == [], "untagged: not orch's"
    for res in (nic, pip, nsg):
        res.tags = {TAG_OWNER: OWNER}
    nsg.tags = {TAG_OWNER: OWNER, anet.TAG_ROLE: anet.ROLE_SSH}
    found = {r.kind: r for r in anet.owned_resources(OWNER, pips=[pip], nsgs=[nsg], nics=[nic])}
    # The published NIC names a VM, the public IP an ipConfiguration; the published NSG is attached to nothing.
    assert found[ResourceKind.NETWORK_INTERFACE].in_use and found[ResourceKind.PUBLIC_IP].in_use
    assert not found[ResourceKind.NETWORK_SECURITY_GROUP].in_use
    assert found[ResourceKind.PUBLIC_IP].resource_id.endswith("/publicIPAddresses/testDNS-ip")


def test_fake_nsg_default_rules_are_the_published_ones(fake: FakeArm, provider: AzureProvider) -> None:
    _provider(fake, ssh_ingress_cidrs=["203.0.113.7/32"]).launch(spec())
    [nsg] = fake.state.nsgs.values()

    def shape(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"name": r["name"], **r["properties"]} for r in rules]

    published = _example("NetworkSecurityGroupGet.json")["properties"]["defaultSecurityRules"]
    assert shape(nsg["properties"]["defaultSecurityRules"]) == shape(published)
    ours = {r["name"]: set(r["properties"]) for r in nsg["properties"]["securityRules"]}
    published_keys = set(_example("NetworkSecurityGroupGet.json")["properties"]["securityRules"][0]["properties"])
    # The fake answers with the published rule fields (plus description and the plural prefixes orch sends).
    assert ours["orch-ssh"] - published_keys <= {"description", "sourceAddressPrefixes"}
