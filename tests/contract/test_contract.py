"""The contract every provider adapter keeps, through its real client, against its local server."""

from __future__ import annotations

import pytest

from providers.base import (
    Capability,
    CloudResource,
    GpuRequest,
    InstanceState,
    Market,
    Provider,
    ResourceKind,
    new_launch_id,
)
from providers.errors import (
    AuthError,
    InsufficientCapacityError,
    QuotaExceededError,
    RateLimitedError,
)
from tests.contract.harness import Fault, ProviderHarness

OWNER = "contract"


def _alive(state: InstanceState) -> bool:
    return state in (InstanceState.PENDING, InstanceState.RUNNING)


def test_launch_get_list_terminate(harness: ProviderHarness) -> None:
    p = harness.provider()
    spec = harness.launch_spec(new_launch_id(), OWNER)
    inst = p.launch(spec)
    assert inst.provider == p.name
    assert inst.launch_id == spec.launch_id
    assert inst.owner == OWNER
    assert _alive(inst.state)

    got = p.get(inst.instance_id)
    assert got is not None and got.instance_id == inst.instance_id and got.launch_id == spec.launch_id

    listed = [i for i in p.list_instances(OWNER) if not i.state.is_gone]
    assert [i.instance_id for i in listed] == [inst.instance_id]
    assert all(i.owner == "someone-else" for i in p.list_instances("someone-else"))
    assert inst.instance_id not in {i.instance_id for i in p.list_instances("someone-else")}

    p.terminate(inst.instance_id)
    after = p.get(inst.instance_id)
    # Gone, or on its way out (a cloud may report shutting-down for a moment): never still running.
    assert after is None or after.state in (InstanceState.TERMINATED, InstanceState.STOPPING)
    assert all(i.state in (InstanceState.TERMINATED, InstanceState.STOPPING)
               for i in p.list_instances(OWNER) if i.instance_id == inst.instance_id)


def test_launch_is_idempotent_on_launch_id(harness: ProviderHarness) -> None:
    p = harness.provider()
    spec = harness.launch_spec(new_launch_id(), OWNER)
    first = p.launch(spec)
    second = p.launch(spec)
    assert first.instance_id == second.instance_id
    live = [i for i in p.list_instances(OWNER) if i.launch_id == spec.launch_id and not i.state.is_gone]
    assert len(live) == 1


def test_terminate_twice_and_missing_are_fine(harness: ProviderHarness) -> None:
    p = harness.provider()
    inst = p.launch(harness.launch_spec(new_launch_id(), OWNER))
    p.terminate(inst.instance_id)
    p.terminate(inst.instance_id)
    p.terminate(harness_missing_id(harness))


def harness_missing_id(harness: ProviderHarness) -> str:
    return getattr(harness, "missing_instance_id", "does-not-exist-12345")


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault.CAPACITY, InsufficientCapacityError),
        (Fault.QUOTA, QuotaExceededError),
        (Fault.THROTTLE, RateLimitedError),
        (Fault.AUTH, AuthError),
    ],
)
def test_injected_faults_surface_as_taxonomy(harness: ProviderHarness, fault: Fault, error: type) -> None:
    if fault not in harness.supported_faults:
        pytest.skip(f"{harness.name} has no {fault} failure mode")
    p = harness.provider()
    harness.inject(fault, times=100)
    with pytest.raises(error):
        p.launch(harness.launch_spec(new_launch_id(), OWNER))
    harness.reset()
    assert [i for i in p.list_instances(OWNER) if not i.state.is_gone] == []


def test_transient_server_error_is_retried(harness: ProviderHarness) -> None:
    if Fault.SERVER_ERROR not in harness.supported_faults:
        pytest.skip(f"{harness.name} has no server-error failure mode")
    p = harness.provider()
    harness.inject(Fault.SERVER_ERROR, times=1)
    spec = harness.launch_spec(new_launch_id(), OWNER)
    inst = p.launch(spec)
    assert inst.launch_id == spec.launch_id
    live = [i for i in p.list_instances(OWNER) if not i.state.is_gone]
    assert [i.instance_id for i in live] == [inst.instance_id]


def test_preempted_spot_reads_as_preempted(harness: ProviderHarness) -> None:
    if not harness.supports_spot:
        pytest.skip(f"{harness.name} has no spot market")
    p = harness.provider()
    inst = p.launch(harness.launch_spec(new_launch_id(), OWNER, Market.SPOT))
    assert inst.market is Market.SPOT
    harness.preempt(inst.instance_id)
    got = p.get(inst.instance_id)
    assert got is not None, "a preempted instance must still be visible with its reason"
    assert got.state is InstanceState.PREEMPTED
    assert harness.preempted_reason in f"{got.raw_reason} {got.raw_state}"


def test_offers_match_the_request(harness: ProviderHarness) -> None:
    p = harness.provider()
    spec = harness.launch_spec(new_launch_id(), OWNER)
    req = GpuRequest(gpus=(spec.offer.gpu,), count=spec.offer.gpu_count)
    offers = p.offers(req)
    assert offers, "the provider offers what its harness launches"
    assert all(o.provider == p.name and o.gpu == spec.offer.gpu and o.gpu_count == spec.offer.gpu_count
               for o in offers)


def test_get_of_an_unknown_instance_is_none(harness: ProviderHarness) -> None:
    assert harness.provider().get(harness_missing_id(harness)) is None


def test_a_provider_says_spot_exactly_when_it_launches_spot(harness: ProviderHarness) -> None:
    """The planner offers spot only where Capability.SPOT says so; the spot tests above run where it does."""
    assert (Capability.SPOT in harness.provider().capabilities) == harness.supports_spot


def test_offers_keep_the_requested_market(harness: ProviderHarness) -> None:
    p = harness.provider()
    spec = harness.launch_spec(new_launch_id(), OWNER)
    for market in (Market.ON_DEMAND, Market.SPOT):
        req = GpuRequest(gpus=(spec.offer.gpu,), count=spec.offer.gpu_count, markets=frozenset({market}))
        assert all(o.market is market for o in p.offers(req))


def test_a_restarted_orch_finds_its_launch_instead_of_making_another(harness: ProviderHarness) -> None:
    """A second provider object (a daemon restarted after a lost answer) launching the same id gets the same one."""
    spec = harness.launch_spec(new_launch_id(), OWNER)
    first = harness.provider().launch(spec)
    again = harness.provider().launch(spec)
    assert again.instance_id == first.instance_id
    assert [i.instance_id for i in harness.provider().list_instances(OWNER) if not i.state.is_gone] == [
        first.instance_id]


# -- what orch creates besides instances ------------------------------------------------------------------
def _until_gone(p: Provider, instance_id: str) -> None:
    """Read until the cloud reports the instance gone (fakes advance one step per read; bounded)."""
    for _ in range(10):
        got = p.get(instance_id)
        if got is None or got.state in (InstanceState.TERMINATED, InstanceState.PREEMPTED):
            return
    raise AssertionError(f"{instance_id} still there after terminate")


def test_network_resources_are_owned_listed_and_deleted_once_unused(harness: ProviderHarness) -> None:
    p = harness.provider()
    inst = p.launch(harness.launch_spec(new_launch_id(), OWNER))
    made = p.list_network_resources(OWNER)
    assert all(isinstance(r, CloudResource) and r.provider == p.name and r.owner == OWNER for r in made)
    assert all(r.in_use for r in made), "everything orch made for a live instance is in use"
    assert p.list_network_resources("someone-else") == []
    p.terminate(inst.instance_id)
    _until_gone(p, inst.instance_id)
    left = p.list_network_resources(OWNER)
    assert not [r for r in left if r.in_use], "nothing is in use once the instance is gone"
    for r in left:
        p.delete_network_resource(r)
        p.delete_network_resource(r)                       # idempotent: missing == success
    assert p.list_network_resources(OWNER) == []


def test_the_network_opened_for_ssh_is_listed(harness: ProviderHarness) -> None:
    """AWS, GCP and Azure open port 22 themselves (a security group, a firewall rule, an NSG)."""
    kinds = {"aws": ResourceKind.SECURITY_GROUP, "gcp": ResourceKind.FIREWALL_RULE,
             "azure": ResourceKind.NETWORK_SECURITY_GROUP}
    p = harness.provider()
    p.launch(harness.launch_spec(new_launch_id(), OWNER))
    listed = {r.kind for r in p.list_network_resources(OWNER)}
    if harness.name in kinds:
        assert kinds[harness.name] in listed
    else:
        assert listed == set(), f"{harness.name} creates nothing besides instances"
