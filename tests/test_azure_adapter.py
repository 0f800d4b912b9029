"""Azure beyond the contract: the ARM body sent, NIC and disk clean-up, LRO failures, translation."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from azure.core.exceptions import HttpResponseError

from providers.azure.adapter import translate_error
from providers.base import Market, new_launch_id
from providers.errors import (
    AuthError,
    InsufficientCapacityError,
    ProviderUnavailableError,
    QuotaExceededError,
    RateLimitedError,
)
from tests.contract.harness_azure import AzureHarness


@pytest.fixture(scope="module")
def azure() -> Iterator[AzureHarness]:
    h = AzureHarness()
    yield h
    h.close()


def test_spot_vm_body_tags_custom_data_and_nic(azure: AzureHarness) -> None:
    azure.reset()
    p = azure.provider()
    spec = azure.launch_spec(new_launch_id(), "alice", Market.SPOT)
    p.launch(spec)
    body = next(b for m, path, b in azure.fake.state.requests if m == "PUT" and "virtualMachines" in path)
    props = body["properties"]
    assert props["priority"] == "Spot" and props["evictionPolicy"] == "Deallocate"
    assert props["billingProfile"]["maxPrice"] == -1
    assert body["tags"] == {"orch:launch-id": spec.launch_id, "orch:owner": "alice", "orch:job": "contract"}
    assert base64.b64decode(props["osProfile"]["customData"]).decode() == spec.startup_script
    assert props["hardwareProfile"]["vmSize"] == "Standard_NC24ads_A100_v4"
    nic_id = props["networkProfile"]["networkInterfaces"][0]["id"]
    assert nic_id.endswith(f"/networkInterfaces/{spec.name}-nic") and f"{spec.name}-nic" in azure.fake.state.nics


def test_terminate_removes_vm_nic_and_disk(azure: AzureHarness) -> None:
    azure.reset()
    p = azure.provider()
    inst = p.launch(azure.launch_spec(new_launch_id(), "alice"))
    p.terminate(inst.instance_id)
    assert azure.fake.state.vms == {} and azure.fake.state.nics == {}
    assert f"{inst.instance_id}-os" in azure.fake.state.disks_deleted


def test_allocation_failure_inside_the_lro_leaves_nothing_behind(azure: AzureHarness) -> None:
    azure.reset()
    p = azure.provider()
    azure.fake.inject("capacity-lro")
    with pytest.raises(InsufficientCapacityError) as err:
        p.launch(azure.launch_spec(new_launch_id(), "alice"))
    assert err.value.code == "AllocationFailed"
    assert azure.fake.state.vms == {} and azure.fake.state.nics == {}


class _Resp:
    def __init__(self, status: int, code: str) -> None:
        self.status_code = status
        self.reason = "x"
        self.headers = {"content-type": "application/json"}
        self._body = (f'{{"error": {{"code": "{code}", "message": "m"}}}}').encode()
        self.request = None
        self.content_type = "application/json"

    def text(self, encoding: str | None = None) -> str:
        return self._body.decode()

    def body(self) -> bytes:
        return self._body


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [(409, "SkuNotAvailable", InsufficientCapacityError), (200, "AllocationFailed", InsufficientCapacityError),
     (409, "OperationNotAllowed", QuotaExceededError), (429, "TooManyRequests", RateLimitedError),
     (403, "AuthorizationFailed", AuthError), (500, "InternalServerError", ProviderUnavailableError)],
)
def test_translate_error(status: int, code: str, cls: type) -> None:
    err = translate_error(HttpResponseError(response=_Resp(status, code)))  # type: ignore[arg-type]
    assert type(err) is cls
