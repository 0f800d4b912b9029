"""The sweep collects orch's leftover network resources (orchestrator/engine/leftovers.py) like orphan
instances: on the fakes through the real SDKs (moto's EC2 security group, the Azure ARM fake's NSG, public IP
and NIC, the GCE fake's firewall rule), with the engine's fake clock.

A machine orch launched is left behind by a crash (its launch id unknown to the store): the sweep ends it
after the grace, its network resource is then unused, and after the grace again it is deleted. Nothing in
use, nothing younger than the grace, nothing of another owner is touched; a resource already gone or taken
again is no error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import Service, ServiceSettings, build_service
from orchestrator.engine.config import EngineConfig, EngineDeps
from orchestrator.engine.facts import TickFacts
from orchestrator.engine.leftovers import NetworkSweep
from orchestrator.engine.tick import TickLog
from providers.base import TAG_OWNER, CloudResource, LaunchSpec, Market, Provider, ResourceKind, new_launch_id
from providers.errors import ResourceInUseError, ResourceNotFoundError
from tests.fakes.memory_provider import MemoryProvider
from tests.fakes.memory_store import MemoryStore

OWNER = "alice"
GRACE = timedelta(minutes=10)
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Clock:
    """Starts at the real time: the GCE fake stamps a firewall rule's creation with it."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def engine(name: str, provider: Provider, clock: Clock) -> tuple[Service, MemoryStore]:
    store = MemoryStore()
    service = build_service(config=OrchConfig(owner=OWNER), engine_store=store, providers={name: provider},
                            catalog=[], clock=clock, settings=ServiceSettings(orphan_grace=GRACE))
    return service, store


def collect(name: str, provider: Provider, launch: Callable[[str], object], kinds: set[ResourceKind],
            ) -> MemoryStore:
    """Leave a launched machine behind, tick through the two graces, check each step; returns the store."""
    clock = Clock()
    service, store = engine(name, provider, clock)
    launch(OWNER)
    launch("bob")                                           # another owner's: never ours to touch
    mine = {r.kind for r in provider.list_network_resources(OWNER)}
    assert kinds <= mine, mine
    theirs = provider.list_network_resources("bob")

    service.reconciler.tick()                               # the machine uses them: kept
    assert kinds <= {r.kind for r in provider.list_network_resources(OWNER)}
    clock.now += GRACE
    service.reconciler.tick()                               # the orphan machine ends; now unused: first seen
    assert store.kinds().count("orphan-terminated") == 1
    left = provider.list_network_resources(OWNER)
    assert left and not any(r.in_use for r in left)
    clock.now += GRACE / 2
    service.reconciler.tick()                               # unused, but not yet for the grace
    assert provider.list_network_resources(OWNER) == left
    clock.now += GRACE / 2
    service.reconciler.tick()                               # unused for the grace: deleted
    assert provider.list_network_resources(OWNER) == []
    assert store.kinds().count("leftover-deleted") == len(left)
    assert provider.list_network_resources("bob") == theirs
    service.close()
    return store


# --- AWS: moto's EC2, orch's SSH security group ---------------------------------------------------------
def test_aws_security_group_of_a_crashed_launch_is_collected() -> None:
    from providers.aws.adapter import AwsProvider
    from tests.contract.harness_aws import REGION, catalog_offer
    from tests.fakes.aws import FAKE_ENV, FakeAws
    from tests.test_aws_adapter import _settings

    fake = FakeAws()
    try:
        session = boto3.Session(aws_access_key_id=FAKE_ENV["AWS_ACCESS_KEY_ID"],
                                aws_secret_access_key=FAKE_ENV["AWS_SECRET_ACCESS_KEY"], region_name=REGION)
        p = AwsProvider(_settings(fake, ssh_ingress_cidrs=["203.0.113.7/32"]), session=session)

        def launch(owner: str) -> object:
            return p.launch(LaunchSpec(new_launch_id(), owner, "j1", catalog_offer(Market.ON_DEMAND)))

        collect("aws", p, launch, {ResourceKind.SECURITY_GROUP})
        p.close()
    finally:
        fake.close()


# --- Azure: the ARM fake, orch's NSG (the VM's NIC and public IP go with the VM) --------------------------
def test_azure_nsg_of_a_crashed_launch_is_collected() -> None:
    pytest.importorskip("azure.mgmt.network")
    from providers.azure.adapter import AzureProvider
    from providers.retry import RetryPolicy
    from tests.contract.harness_azure import catalog_offer, make_settings
    from tests.fakes.azure_arm import FakeArm

    fake = FakeArm()
    fake.serve()
    try:
        p = AzureProvider(make_settings(fake.url), retry=RetryPolicy.fast())  # type: ignore[arg-type]
        n = iter(range(10, 99))

        def launch(owner: str) -> object:
            return p.launch(LaunchSpec(f"l0000000000{next(n)}", owner, "j1", catalog_offer(Market.ON_DEMAND),
                                       ssh_public_key="ssh-ed25519 AAAAC3Nza alice@laptop"))

        collect("azure", p, launch, {ResourceKind.NETWORK_SECURITY_GROUP, ResourceKind.PUBLIC_IP,
                                     ResourceKind.NETWORK_INTERFACE})
        assert [nsg["tags"].get(TAG_OWNER) for nsg in fake.state.nsgs.values()] == ["bob"]
        p.close()
    finally:
        fake.close()


# --- GCP: the GCE fake, orch's firewall rule ----------------------------------------------------------
def test_gcp_firewall_rule_of_a_crashed_launch_is_collected() -> None:
    from providers.gcp.adapter import GcpProvider
    from tests.contract.harness_gcp import catalog_offer
    from tests.fakes.gce import GceServer
    from tests.test_gcp_adapter import _settings

    server = GceServer().start()
    try:
        p = GcpProvider(_settings(server))
        n = iter(range(10, 99))

        def launch(owner: str) -> object:
            return p.launch(LaunchSpec(f"l00000000{next(n)}", owner, "j1", catalog_offer(Market.ON_DEMAND)))

        collect("gcp", p, launch, {ResourceKind.FIREWALL_RULE})
        assert server.fake.firewall("orch-alice-intra-default") is None
        assert server.fake.firewall("orch-bob-intra-default") is not None
        p.close()
    finally:
        server.stop()


# --- the rules, on a provider that says exactly what the test wants ---------------------------------------
class Scripted(MemoryProvider):
    def __init__(self, resources: list[CloudResource], errors: dict[str, Exception]) -> None:
        super().__init__("fake", [])
        self.resources, self.errors, self.deleted = resources, errors, []  # type: ignore[var-annotated]

    def list_network_resources(self, owner: str) -> list[CloudResource]:
        return [r for r in self.resources if r.owner == owner]

    def delete_network_resource(self, resource: CloudResource) -> None:
        if resource.name in self.errors:
            raise self.errors[resource.name]
        self.deleted.append(resource.name)


def res(name: str, *, launch_id: str | None = None, in_use: bool = False, owner: str = OWNER,
        created: datetime | None = T0 - timedelta(days=1)) -> CloudResource:
    return CloudResource("fake", ResourceKind.KEY_PAIR, f"r/{name}", name, owner, in_use, created, launch_id)


@pytest.fixture
def sweep_world() -> Iterator[Callable[..., list[str]]]:
    def run(resources: list[CloudResource], live: set[str], errors: dict[str, Exception] | None = None,
            ticks: int = 2) -> list[str]:
        provider = Scripted(resources, errors or {})
        deps = EngineDeps(store=MemoryStore(), providers={"fake": provider}, catalog=(),
                          config=EngineConfig(owner=OWNER, orphan_grace=GRACE), clock=lambda: T0)
        sweep, log = NetworkSweep(), TickLog()
        for i in range(ticks):
            facts = TickFacts(now=T0 + i * GRACE, listed={"fake": ()}, unlistable=frozenset(), jobs={},
                              observed=(), draining=(), held_jobs=frozenset())
            sweep.run(deps, facts, live, log)
        assert log.report.errors == []
        return provider.deleted

    yield run


def test_only_unused_owned_old_resources_of_no_live_launch_go(sweep_world) -> None:  # type: ignore[no-untyped-def]
    deleted = sweep_world([res("old"), res("used", in_use=True), res("bobs", owner="bob"),
                           res("young", created=T0 + GRACE - timedelta(seconds=1)),
                           res("live-launch", launch_id="l1"), res("ended-launch", launch_id="l2")], {"l1"})
    assert deleted == ["old", "ended-launch"]


def test_one_seen_unused_once_waits_the_grace(sweep_world) -> None:  # type: ignore[no-untyped-def]
    assert sweep_world([res("old")], set(), ticks=1) == []   # first sighting: not yet unused for the grace


def test_gone_or_taken_again_is_no_error(sweep_world) -> None:  # type: ignore[no-untyped-def]
    errors: dict[str, Exception] = {"gone": ResourceNotFoundError("x", provider="fake"),
                                    "taken": ResourceInUseError("x", provider="fake")}
    assert sweep_world([res("gone"), res("taken"), res("old")], set(), errors) == ["old"]
