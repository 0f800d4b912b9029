"""Each provider says which of its states bill (``Instance.billing``), and the spend step charges them.

orch's ``InstanceState`` folds a cloud's words together: Azure's own table bills a VM ``Starting``, ``Stopping``
and ``Stopped`` (allocated), which map to PENDING, STOPPING and STOPPED, states AWS does not bill in (its table
bills only ``running``). The spend step charged RUNNING and UNREACHABLE only, so an Azure VM stuck starting
until the boot timeout cost money orch never counted. A provider that says nothing keeps the default.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

import pytest
import yaml
from sqlmodel import func, select

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import ServiceSettings, build_service
from orchestrator.engine.states import EndCause
from orchestrator.manifest.schema import Manifest
from orchestrator.store import open_store, repo
from orchestrator.store.models import Spend
from providers.azure.instances import billing, map_state
from providers.base import Instance, InstanceState, LaunchSpec, Market, Offer
from providers.gpus import Interconnect
from tests.fakes.memory_provider import MemoryProvider
from tests.support.clock import ManualClock as Clock

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ROOT / "examples" / "command.yaml"
PRICE = 0.6
T4 = Offer("azure", "Standard_NC4as_T4_v3", "eastus", None, "T4-16G", 1, 16, 4, 28, Interconnect.PCIE,
           Market.SPOT, PRICE, date(2026, 12, 1), True)
BOOT = timedelta(minutes=20)          # ServiceSettings' default boot timeout


@pytest.mark.parametrize(("prov", "power", "state", "bills"), [
    ("succeeded", "starting", InstanceState.PENDING, True),
    ("succeeded", "running", InstanceState.RUNNING, True),
    ("succeeded", "stopping", InstanceState.STOPPING, True),
    ("succeeded", "stopped", InstanceState.STOPPED, True),        # allocated on its host: still billed
    ("succeeded", "deallocating", InstanceState.STOPPING, False),
    ("succeeded", "deallocated", InstanceState.STOPPED, False),
    ("creating", None, InstanceState.PENDING, False),             # Azure: Creating is not billed
    ("succeeded", "unknown", InstanceState.UNREACHABLE, True),    # not gone: the default bills it
])
def test_azure_says_which_of_its_states_bill(prov: str, power: str | None, state: InstanceState, bills: bool) -> None:
    mapped, raw, _ = map_state(prov, power, spot=False, stopped_by_orch=True)
    inst = Instance("azure", "vm-1", "l1", "tester", mapped, "Standard_NC4as_T4_v3", "eastus", raw_state=raw,
                    billing=billing(prov, power))
    assert (inst.state, inst.bills) == (state, bills)


class StuckStarting(MemoryProvider):
    """Every VM stays listed as starting; ``billing`` is what the provider says of that state."""

    def __init__(self, billing: bool | None) -> None:
        super().__init__("azure", [T4])
        self.billing = billing

    def launch(self, spec: LaunchSpec) -> Instance:
        inst = replace(super().launch(spec), state=InstanceState.PENDING, raw_state="PowerState/starting",
                       billing=self.billing)
        self.plant(inst)
        return inst


@pytest.mark.parametrize(("said", "billed"), [(True, BOOT), (None, timedelta(0))])
def test_a_vm_billed_while_starting_is_charged_until_it_is_ended(tmp_path: Path, said: bool | None,
                                                                 billed: timedelta) -> None:
    clock = Clock()
    store = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    azure = StuckStarting(said)
    service = build_service(config=OrchConfig(owner="tester"), store=store, providers={"azure": azure},
                            catalog=[T4], clock=clock, settings=ServiceSettings())
    try:
        doc = yaml.safe_load(COMMAND.read_text())
        doc["policies"].update(max_relaunches=0)        # one machine: ended at the boot timeout, job failed
        m = Manifest.model_validate(doc)
        with store.transaction() as tx:
            repo.apply_jobs(tx, [repo.AppliedJob(m, "h")], now=clock())
            job_id = repo.require_job(tx, m.name).id or 0
        for _ in range(int(BOOT / timedelta(minutes=1)) + 10):
            service.reconciler.tick()
            clock.advance(minutes=1)
        [attempt] = service.engine_store.attempts_for_job(job_id)
        assert attempt.end_cause is EndCause.BOOT_TIMEOUT and azure.live() == []
        service.engine_store.flush()        # type: ignore[attr-defined]
        with store.transaction() as tx:
            total = float(tx.exec(select(func.coalesce(func.sum(Spend.usd), 0.0))).one())
        assert total == pytest.approx(PRICE * billed.total_seconds() / 3600, abs=PRICE / 60), total
    finally:
        service.close()


class SlowToStop(MemoryProvider):
    """A terminate leaves the machine listed stopping (``billing``: what the provider says of that state) until
    ``gone()``."""

    def __init__(self, name: str, offers: list[Offer], billing: bool | None) -> None:
        super().__init__(name, offers)
        self.billing = billing

    def terminate(self, instance_id: str) -> None:
        inst = self.cloud.instances.get(instance_id)
        if inst is not None and not inst.state.is_gone:
            self.plant(replace(inst, state=InstanceState.STOPPING, raw_state="PowerState/stopping",
                               billing=self.billing))

    def gone(self) -> None:
        for inst in list(self.cloud.instances.values()):
            super().terminate(inst.instance_id)


@pytest.mark.parametrize(("said", "stopping_billed"), [(True, timedelta(minutes=10)), (None, timedelta(0))])
def test_a_machine_billed_while_stopping_is_charged_as_a_straggler(said: bool | None,
                                                                   stopping_billed: timedelta) -> None:
    from tests.fakes.memory_store import MemoryStore
    from tests.test_engine import CATALOG, engine, spec
    from tests.test_engine import Clock as EngineClock

    clock, store = EngineClock(), MemoryStore()
    aws, gcp = SlowToStop("aws", CATALOG, said), MemoryProvider("gcp", CATALOG)
    rec = engine(store, {"aws": aws, "gcp": gcp}, CATALOG, clock,
                 settings=ServiceSettings(boot_timeout=timedelta(minutes=5)))
    store.add_job(spec(max_relaunches=0), clock())
    rec.tick()
    while "boot-timeout" not in store.kinds():
        assert clock().minute < 30
        clock.advance(minutes=1)
        rec.tick()
    ended_at = clock()
    assert [i.state for i in aws.live()] == [InstanceState.STOPPING]
    for _ in range(10):                 # listed stopping for ten minutes, then gone
        clock.advance(minutes=1)
        rec.tick()
    aws.gone()
    for _ in range(3):
        clock.advance(minutes=1)
        rec.tick()
    store.settled()
    last = max(until for _, _, until, _, _ in store.charges)
    assert last - ended_at == stopping_billed, (ended_at, last)
