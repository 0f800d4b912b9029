"""A Vast catalog offer (no ask id) is rented as the cheapest live ask of its GPU, count and market: never one
dearer than the offer was quoted at. The quote is what orch's plan showed and what the budgets' gate checked and
reserved (docs/configuration.md, Budgets); before, the launch rented whatever the cheapest live ask cost (the
fake's only H100 bills $2.12/h against a $1.00/h quote), so a $1.50/h ceiling ran $2.12/h with every check
passed. Now such an ask is refused before any create (``InsufficientCapacityError``, ``dearer_than_quoted``) and
the engine moves on to its next offer, whose own price the gate checks. Compared disk for disk: a catalog row is
priced with 100 GB, so a job's bigger disk is not a dearer ask."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

import pytest

from orchestrator.config.file import OrchConfig
from orchestrator.daemon.assembly import ServiceSettings, build_service
from orchestrator.engine.states import JobStatus
from orchestrator.money.budgets import Budget
from orchestrator.store import open_store, repo
from providers.base import Availability, Interconnect, Market, Offer, OfferOrigin
from providers.errors import InsufficientCapacityError
from providers.vastai.adapter import VastProvider
from tests.daemon_world import OWNER, PUBLIC_KEY, add_job, running_fakes
from tests.fakes.vast import VastFake
from tests.support.clock import ManualClock
from tests.test_vast_adapter import bodies, fake, spec_for, url, vast  # noqa: F401

#: The fake's one rentable 1x H100 (ask 7003001) bills dph_base $2.10/h plus 100 GB of disk at $0.15/GB/month.
H100_BILLED_100GB = 2.10 + 100 * 0.15 / 720


def test_a_catalog_offer_is_never_rented_dearer_than_quoted(fake: VastFake, vast: VastProvider) -> None:  # noqa: F811
    spec = spec_for(None, gpu="H100-80G")                      # quoted $1.00/h
    with pytest.raises(InsufficientCapacityError) as refused:
        vast.launch(spec)
    assert refused.value.code == "dearer_than_quoted" and "$1.00/h" in str(refused.value)
    assert bodies(fake, "PUT", "/asks/") == []                 # before: rented at $2.12/h


@pytest.mark.parametrize("disk_gb", [40, 500])
def test_a_catalog_offer_quoted_at_the_asks_price_is_rented(fake: VastFake, vast: VastProvider,  # noqa: F811
                                                             disk_gb: int) -> None:
    """Disk for disk: the job's 40 GB (or 500 GB) is its own; the ask is compared at the catalog's 100 GB."""
    spec = spec_for(None, gpu="H100-80G")
    vast.launch(replace(spec, disk_gb=disk_gb, offer=replace(spec.offer, price_hr=round(H100_BILLED_100GB, 6))))
    assert len(bodies(fake, "PUT", "/asks/")) == 1


H100_CATALOG = Offer("vastai", "1x-H100_SXM-26-257000", "Virginia, US", None, "H100-80G", 1, 80, 26, 251,
                     Interconnect.PCIE, Market.ON_DEMAND, 1.00, date(2026, 12, 1), True, OfferOrigin.CATALOG,
                     Availability.UNKNOWN)


def test_a_budget_ceiling_holds_when_the_live_ask_is_dearer_than_the_catalog(tmp_path: Path) -> None:
    """The engine end to end: a $1.50/h ceiling, a $1.00/h catalog H100 whose only live ask bills $2.12/h."""
    clock = ManualClock()
    with running_fakes() as fakes:
        store = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
        svc = build_service(config=OrchConfig(owner=OWNER, budgets=(Budget("fleet", max_usd_per_hour=1.5),)),
                            store=store, providers=fakes.build_providers(), catalog=[H100_CATALOG], clock=clock,
                            settings=ServiceSettings(orphan_grace=timedelta(0), ssh_public_key=PUBLIC_KEY))
        try:
            job_id = add_job(store, "train", now=clock(), gpus=["H100-80G"], market="on-demand",
                             providers=["vastai"])
            for _ in range(3):
                svc.reconciler.tick()
                clock.advance(minutes=1)
            assert fakes.live_instances()["vastai"] == []      # before: an H100 at $2.12/h under a $1.50/h ceiling
            with store.transaction() as tx:
                job = repo.require_job(tx, "train")
                assert job.id == job_id and job.status == JobStatus.PENDING.value
                assert "launch-refused" in [e.kind for e in repo.list_events(tx)]
        finally:
            svc.close()
