"""The Azure fake holds every PUT to the REST spec's shapes and the customData limit
(tests/fakes/azure_contract.py); the adapter's own bodies pass, and each refusal Azure gives reaches orch as
its typed error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.mgmt.network")

from providers.azure.adapter import AzureProvider
from providers.base import LaunchSpec, Market
from providers.errors import InsufficientCapacityError, InvalidRequestError, PriceTooLowError, QuotaExceededError
from providers.retry import RetryPolicy
from tests.contract.harness_azure import catalog_offer, make_settings
from tests.fakes.azure_arm import FakeArm
from tests.fakes.azure_contract import CUSTOM_DATA_MAX_BYTES, check_body


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeArm]:
    f = FakeArm()
    f.serve()
    yield f
    f.close()


@pytest.fixture
def provider(fake: FakeArm) -> Iterator[AzureProvider]:
    fake.reset()
    p = AzureProvider(make_settings(fake.url), retry=RetryPolicy.fast())  # type: ignore[arg-type]
    yield p
    p.close()


def _spec(market: Market = Market.ON_DEMAND, script: str = "#!/bin/sh\necho hi\n", launch_id: str = "l0123456789ab",
          **kw: Any) -> LaunchSpec:
    return LaunchSpec(launch_id=launch_id, owner="alice", job="train-7", offer=catalog_offer(market),
                      ssh_public_key="ssh-ed25519 AAAAC3Nza alice@laptop", startup_script=script, disk_gb=256, **kw)


def test_the_adapter_s_bodies_are_accepted(provider: AzureProvider, fake: FakeArm) -> None:
    on_demand = provider.launch(_spec())
    spot = provider.launch(_spec(Market.SPOT, launch_id="l0123456789ac", max_price_hr=3.5))
    for inst in (on_demand, spot):
        provider.terminate(inst.instance_id)
    kinds = {r.path.split("/providers/")[1].split("/")[1].lower() for r in fake.requests if r.method == "PUT"}
    assert {"virtualmachines", "networkinterfaces"} <= kinds
    assert fake.refusals == []


def test_shapes_come_from_the_spec() -> None:
    vm = {"location": "eastus", "properties": {"hardwareProfile": {"vmSize": "Standard_NC24ads_A100_v4"}}}
    assert check_body("virtualMachines", vm) is None
    unknown = check_body("virtualMachines", {**vm, "properties": {**vm["properties"], "hardwareProfil": {}}})
    assert unknown is not None and unknown.code == "InvalidRequestContent"
    assert "Could not find member 'hardwareProfil' on object of type 'VirtualMachineProperties'" in unknown.message
    wrong = check_body("virtualMachines", {**vm, "properties": {"billingProfile": {"maxPrice": "cheap"}}})
    assert wrong is not None and "Path 'properties.billingProfile.maxPrice'" in wrong.message
    nic = {"location": "eastus", "properties": {"ipConfigurations": [{"name": "ip", "properties": {
        "subnet": {"id": "/s"}, "publicIPAddress": {"id": "/p"}}}]}}
    assert check_body("networkInterfaces", nic) is None
    assert check_body("networkInterfaces", {**nic, "properties": {"ipConfiguration": []}}) is not None
    assert check_body("publicIPAddresses", {"location": "eastus", "sku": {"name": 1}}) is not None
    assert check_body("networkSecurityGroups", {"location": "eastus", "properties": {"securityRules": [
        {"name": "ssh", "properties": {"priority": "high"}}]}}) is not None


@pytest.mark.parametrize("user", ["root", "admin", "Administrator", "test1", "support_388945a0", "", "u" * 65])
def test_the_fake_refuses_the_admin_usernames_the_spec_disallows(fake: FakeArm, user: str) -> None:
    """OSProfile.adminUsername (tests/fakes/azure_contract.py): a reserved name or a Linux length outside 1-64 is
    ARM's 400 InvalidParameter; its JSON type alone is fine, so the shape check took it."""
    import httpx

    from tests.contract.harness_azure import SUB

    vm = {"location": "eastus", "properties": {"hardwareProfile": {"vmSize": "Standard_NC24ads_A100_v4"},
                                               "osProfile": {"computerName": "x", "adminUsername": user}}}
    refusal = check_body("virtualMachines", vm)
    assert refusal is not None and refusal.code == "InvalidParameter" and refusal.target == "adminUsername"
    assert refusal.message == "The Admin Username specified is not allowed."
    fake.reset()
    url = f"{fake.url}/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm1"
    answer = httpx.put(url, params={"api-version": "2024-07-01"}, json=vm, headers={"Authorization": "Bearer t"})
    assert answer.status_code == 400 and answer.json()["error"] == {
        "code": "InvalidParameter", "message": "The Admin Username specified is not allowed.",
        "target": "adminUsername"}
    assert fake.state.vms == {}
    ok = {**vm, "properties": {**vm["properties"], "osProfile": {"computerName": "x", "adminUsername": "orch"}}}
    assert check_body("virtualMachines", ok) is None


@pytest.mark.parametrize("user", ["root", "Admin", "u" * 65, ""])
def test_an_admin_username_azure_refuses_is_a_settings_error(user: str) -> None:
    """The adapter never sends it: the setting is refused when read, before any NIC, IP or VM is made."""
    from providers.azure.settings import Settings

    with pytest.raises(ValueError, match="admin_username"):
        Settings(subscription_id="s", resource_group="rg", admin_username=user)


def test_the_fake_refuses_an_os_disk_smaller_than_its_image_as_arm_does(fake: FakeArm) -> None:
    import httpx

    from tests.contract.harness_azure import SUB
    from tests.fakes.azure_arm import IMAGE_OS_DISK_GB

    [(publisher, offer, sku)] = list(IMAGE_OS_DISK_GB)
    size = IMAGE_OS_DISK_GB[(publisher, offer, sku)]
    vm = {"location": "eastus", "properties": {
        "hardwareProfile": {"vmSize": "Standard_NC24ads_A100_v4"},
        "storageProfile": {"imageReference": {"publisher": publisher, "offer": offer, "sku": sku, "version": "latest"},
                           "osDisk": {"createOption": "FromImage", "diskSizeGB": size - 1}}}}
    fake.reset()
    url = f"{fake.url}/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm1"
    put = {"params": {"api-version": "2024-07-01"}, "headers": {"Authorization": "Bearer t"}}
    answer = httpx.put(url, json=vm, **put)  # type: ignore[arg-type]
    assert answer.status_code == 409 and answer.json()["error"] == {
        "code": "OperationNotAllowed", "target": "osDisk.diskSizeGB",
        "message": f"The specified disk size {size - 1} GB is smaller than the size of the corresponding disk in the "
                   f"VM image: {size} GB. This is not allowed. Please choose equal or greater size or do not specify "
                   "an explicit size."}
    assert fake.state.vms == {}
    del vm["properties"]["storageProfile"]["osDisk"]["diskSizeGB"]      # no explicit size: the image's
    assert httpx.put(url, json=vm, **put).status_code in (200, 201)  # type: ignore[arg-type]


def test_a_job_disk_under_the_image_s_rents_the_image_s_size(provider: AzureProvider, fake: FakeArm) -> None:
    """ARM refuses an OS disk under its image's and does not say the image's size before: the adapter sends the
    same VM again without an explicit size (ARM then makes it the image's), instead of failing every launch."""
    from dataclasses import replace

    inst = provider.launch(replace(_spec(), disk_gb=20))
    vm_puts = [r for r in fake.requests if r.method == "PUT" and "/virtualMachines/" in r.path]
    assert [r.body["properties"]["storageProfile"]["osDisk"].get("diskSizeGB") for r in vm_puts] == [20, None]
    assert inst.instance_id in {name for (_, name) in fake.state.vms}
    provider.launch(replace(_spec(launch_id="l0123456789ad"), disk_gb=256))   # above the image's: the job's own
    last = [r for r in fake.requests if r.method == "PUT" and "/virtualMachines/" in r.path][-1]
    assert last.body["properties"]["storageProfile"]["osDisk"]["diskSizeGB"] == 256


def test_custom_data_over_64_kib_is_an_invalid_request(provider: AzureProvider, fake: FakeArm) -> None:
    with pytest.raises(InvalidRequestError) as err:
        provider.launch(_spec(script="#" * (CUSTOM_DATA_MAX_BYTES + 1)))
    assert fake.refusals and fake.refusals[-1].code == "InvalidParameter"
    assert "maximum length of 87380 characters" in err.value.message


def test_custom_data_at_the_limit_is_accepted(provider: AzureProvider, fake: FakeArm) -> None:
    provider.launch(_spec(script="#" * CUSTOM_DATA_MAX_BYTES))
    assert fake.refusals == []


@pytest.mark.parametrize(("fault", "error", "market"), [
    ("capacity", InsufficientCapacityError, Market.ON_DEMAND),
    ("capacity-lro", InsufficientCapacityError, Market.ON_DEMAND),
    ("quota", QuotaExceededError, Market.ON_DEMAND),
    ("price-too-low", PriceTooLowError, Market.SPOT),
])
def test_known_refusals_are_typed(provider: AzureProvider, fake: FakeArm, fault: str, error: type,
                                  market: Market) -> None:
    fake.inject(fault, times=5)
    kw = {"max_price_hr": 0.01} if market is Market.SPOT else {}
    with pytest.raises(error):
        provider.launch(_spec(market, **kw))
    # Nothing is left behind: a VM that failed after its create was accepted goes, with its NIC and IP.
    assert (fake.state.vms, fake.state.nics, fake.state.pips) == ({}, {}, {})


def test_a_vm_that_fails_after_the_create_wait_is_deleted_with_its_nic_and_ip(provider: AzureProvider,
                                                                              fake: FakeArm) -> None:
    inst = provider.launch(_spec())
    assert fake.state.nics and fake.state.pips
    with fake.lock:   # the allocation fails later, as ARM reports it: provisioningState Failed, no power state
        [vm] = fake.state.vms.values()
        vm["properties"]["provisioningState"] = "Failed"
        vm["_power"] = None
        vm["_failure"] = {"code": "AllocationFailed", "message": "Allocation failed."}
    seen = provider.get(inst.instance_id)
    assert seen is not None and seen.state.value == "terminated"
    assert (fake.state.vms, fake.state.nics, fake.state.pips) == ({}, {}, {})
    assert provider.get(inst.instance_id) is None
