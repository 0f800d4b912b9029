"""Planner: eligibility, ranking by expected cost, flags, live offers merged onto the catalog."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest

from orchestrator.planner import DataSource, PlanRequest, gather_offers, plan, without_zone
from providers.base import Availability, GpuRequest, Market, Offer
from providers.errors import ProviderUnavailableError
from providers.gpus import Interconnect


def offer(provider: str, itype: str, price: float, region: str = "us-east-1", zone: str | None = None,
          market: Market = Market.ON_DEMAND, gpu: str = "A100-80G", vram: float = 80, count: int = 4,
          vcpus: float = 12, mem: float = 48, source: str = "catalog") -> Offer:
    return Offer(provider, itype, region, zone, gpu, count, vram, vcpus, mem, Interconnect.NVLINK, market, price,
                 date(2025, 12, 1), True, source)


OFFERS = [
    offer("aws", "p", 20.0, zone="use1-az1"),
    offer("gcp", "a2", 15.0, region="us-central1", market=Market.SPOT),
    offer("azure", "nc", 18.0, region="eastus"),
    offer("runpod", "r", 5.5, region="US", vcpus=4, mem=16),
]


def test_ranked_by_expected_cost_with_estimate() -> None:
    req = PlanRequest(gpus=("A100-80G",), count=4, nodes=2, estimated_hours=10)
    p = plan(req, gather_offers(req.gpu_request(), OFFERS))
    assert [x.offer.provider for x in p.eligible] == ["runpod", "gcp", "azure", "aws"]
    assert p.chosen is not None and p.chosen.expected_cost_usd == pytest.approx(5.5 * 2 * 10)
    assert p.chosen.total_price_hr == pytest.approx(11.0)


def test_flags_rule_of_thumb_egress_budget_and_spot_note() -> None:
    req = PlanRequest(gpus=("A100-80G",), count=4, estimated_hours=10, budget_usd=160,
                      data=(DataSource("s3://bucket/ds", region="us-east-1", size_gb=500),))
    p = plan(req, gather_offers(req.gpu_request(), OFFERS))
    by = {x.offer.provider: x for x in p.eligible}
    assert "low-vcpu-per-gpu" in by["runpod"].flags and "low-ram-per-gpu" in by["runpod"].flags
    assert any("1 vCPU/GPU is below the 2-4 minimum" in n for n in by["runpod"].notes)
    generous = plan(req, [replace(OFFERS[0], vcpus=96, memory_gb=1152)]).eligible[0]   # 24 vCPU, 288 GB per GPU
    assert not any(f.endswith("-per-gpu") for f in generous.flags)      # the rule of thumb is a minimum
    assert "egress" in by["gcp"].flags and any("~$45.00 for 500 GB" in n for n in by["gcp"].notes)
    assert "egress" not in by["aws"].flags
    assert "over-budget" in by["aws"].flags and "over-budget" in by["azure"].flags
    assert "over-budget" not in by["gcp"].flags            # 15 x 10 = 150 <= 160
    assert any("spot" in n for n in by["gcp"].notes)


def test_hard_constraints_reject_with_reason() -> None:
    offers = [*OFFERS, offer("lambda", "small", 1.0, gpu="A100-40G", vram=40)]
    req = PlanRequest(gpus=("A100-80G", "A100-40G"), count=4, min_vram_gb=48, providers_deny=("azure",),
                      regions_deny=("us-central*",))
    p = plan(req, gather_offers(req.gpu_request(), offers))
    assert [x.offer.provider for x in p.eligible] == ["runpod", "aws"]
    reasons = {x.offer.provider: x.flags[0] for x in p.rejected}
    assert reasons == {"lambda": "vram-below-need", "azure": "provider-denied", "gcp": "region-denied"}


def test_preempted_zone_is_excluded() -> None:
    req = without_zone(PlanRequest(gpus=("A100-80G",), count=4), "use1-az1")
    assert "aws" not in {x.offer.provider for x in plan(req, gather_offers(req.gpu_request(), OFFERS)).eligible}
    req = without_zone(PlanRequest(gpus=("A100-80G",), count=4), None, "us-central1")
    assert "gcp" not in {x.offer.provider for x in plan(req, gather_offers(req.gpu_request(), OFFERS)).eligible}


class Live:
    def __init__(self, offers: list[Offer] | None = None, fail: bool = False) -> None:
        self._offers, self._fail = offers or [], fail

    def offers(self, req: GpuRequest) -> list[Offer]:
        if self._fail:
            raise ProviderUnavailableError("down", provider="x")
        return self._offers


def test_live_offers_replace_catalog_rows_and_a_failing_source_is_skipped() -> None:
    live = replace(offer("aws", "p", 12.0, zone="use1-az1", source="live"), availability=Availability.AVAILABLE)
    merged = gather_offers(GpuRequest(gpus=("A100-80G",), count=4), OFFERS, [Live([live]), Live(fail=True)])
    aws = [o for o in merged if o.provider == "aws"]
    assert len(aws) == 1 and aws[0].price_hr == 12.0 and aws[0].source == "live"
    assert len(merged) == len(OFFERS)
