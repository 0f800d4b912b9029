"""Quote semantics over the shipped catalog and over small planted catalogs."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest

from orchestrator.offers.advice import rule_of_thumb_flags
from orchestrator.offers.quote import (
    QuoteInputError,
    SortKey,
    check_region_glob,
    quote,
    relaxations,
    resolve_gpu_names,
)
from providers.base import GpuRequest, Market, Offer
from providers.catalog import load_catalog
from providers.gpus import Interconnect

TODAY = date(2026, 12, 2)


def offer(provider: str = "aws", itype: str = "x", region: str = "us-east-1", zone: str | None = None,
          gpu: str = "A100-80G", count: int = 4, price: float = 10.0, market: Market = Market.ON_DEMAND,
          vcpus: float = 48, mem: float = 192, vram: float = 80,
          link: Interconnect = Interconnect.NVLINK) -> Offer:
    return Offer(provider, itype, region, zone, gpu, count, vram, vcpus, mem, link, market, price,
                 date(2025, 12, 1), True)


PLANTED = [
    offer("aws", "a", "us-east-1", "use1-az1", price=12.0),
    offer("gcp", "b", "europe-west4", price=9.0, market=Market.SPOT),
    offer("azure", "c", "eastus", price=11.0, link=Interconnect.PCIE),
    offer("lambda", "d", "us-west-1", price=8.0, count=8),
    offer("runpod", "e", "US", gpu="H100-80G", price=13.0),
    offer("vastai", "f", "Sweden, SE", gpu="L4-24G", vram=24, price=1.0),
]


def test_count_means_gpus_in_one_machine() -> None:
    rows = quote(PLANTED, GpuRequest(gpus=("A100-80G",), count=4), SortKey.PRICE, None, TODAY)
    assert [r.offer.instance_type for r in rows] == ["b", "c", "a"]
    assert all(r.offer.gpu_count == 4 for r in rows)


def test_multi_node_totals_cover_every_machine() -> None:
    rows = quote(PLANTED, GpuRequest(gpus=("A100-80G",), count=4, nodes=3), SortKey.PRICE, None, TODAY)
    assert rows[0].total_price_hr == pytest.approx(27.0)
    doc = rows[0].to_json()
    assert doc["total_gpus"] == 12 and doc["nodes"] == 3 and doc["price_hr"] == 9.0
    # --max-price applies to the whole request: 3 nodes x 9 = 27 > 25.
    rows = quote(PLANTED, GpuRequest(gpus=("A100-80G",), count=4, nodes=3, max_price_hr=25),
                 SortKey.PRICE, None, TODAY)
    assert rows == []


def test_several_nodes_are_priced_only_where_orch_launches_several_machines() -> None:
    """The planner excludes RunPod, Vast.ai and Lambda for a job of several nodes (single-node-provider): a quote
    for --nodes 2 listed their machines, often the cheapest, though no job of that shape could launch there."""
    rows = quote(PLANTED, GpuRequest(gpus=("A100-80G", "H100-80G"), count=4, nodes=2), SortKey.PRICE, None, TODAY)
    assert [r.offer.provider for r in rows] == ["gcp", "azure", "aws"]
    one = quote(PLANTED, GpuRequest(gpus=("A100-80G", "H100-80G"), count=4), SortKey.PRICE, None, TODAY)
    assert "runpod" in [r.offer.provider for r in one]
    # Nothing but a single-machine provider's offer: the relaxation says --nodes 1 and why.
    req = GpuRequest(gpus=("L4-24G",), count=4, nodes=2)
    assert quote(PLANTED, req, SortKey.PRICE, None, TODAY) == []
    assert relaxations(PLANTED, req)[0] == "--nodes 1: from $1.00/h (vastai f: single machines only)"


@pytest.mark.parametrize(
    ("req", "expected"),
    [
        (GpuRequest(gpus=("A100-80G",), count=4, markets=frozenset({Market.SPOT})), ["b"]),
        (GpuRequest(gpus=("A100-80G",), count=4, markets=frozenset({Market.ON_DEMAND})), ["c", "a"]),
        (GpuRequest(gpus=("A100-80G",), count=4, providers=("aws",)), ["a"]),
        (GpuRequest(gpus=("A100-80G",), count=4, regions=("us-*",)), ["a"]),
        (GpuRequest(gpus=("A100-80G",), count=4, regions=("use1-az?",)), ["a"]),
        (GpuRequest(gpus=("A100-80G",), count=4, regions=("*WEST*",)), ["b"]),
        (GpuRequest(gpus=("A100-80G",), count=4, max_price_hr=11.0), ["b", "c"]),
        (GpuRequest(gpus=("A100-80G",), count=4, interconnect=Interconnect.PCIE), ["c"]),
        (GpuRequest(gpus=("A100-80G", "H100-80G"), count=4), ["b", "c", "a", "e"]),
        (GpuRequest(count=4, min_vram_gb=40), ["b", "c", "a", "e"]),
        (GpuRequest(count=4, min_vram_gb=81), []),
    ],
)
def test_filters(req: GpuRequest, expected: list[str]) -> None:
    assert [r.offer.instance_type for r in quote(PLANTED, req, SortKey.PRICE, None, TODAY)] == expected


def test_sort_by_price_per_gpu_and_limit() -> None:
    offers = [offer(itype="big", count=8, price=16.0), offer(itype="small", count=8, price=20.0),
              offer(itype="mid", count=8, price=12.0)]
    rows = quote(offers, GpuRequest(count=8), SortKey.PRICE_PER_GPU, 2, TODAY)
    assert [r.offer.instance_type for r in rows] == ["mid", "big"]
    assert rows[0].offer.price_per_gpu_hr == pytest.approx(1.5)


def test_rule_of_thumb_flags() -> None:
    assert rule_of_thumb_flags(offer(count=4, vcpus=12, mem=48)) == []           # 3 vCPU, 12 GB per GPU
    assert rule_of_thumb_flags(offer(count=4, vcpus=4, mem=16)) == ["low-vcpu-per-gpu", "low-ram-per-gpu"]
    assert rule_of_thumb_flags(offer(count=1, vcpus=8, mem=117)) == []             # more is never flagged
    assert rule_of_thumb_flags(offer(count=8, vcpus=8, mem=128)) == ["low-vcpu-per-gpu"]  # 1 vCPU, 16 GB
    assert rule_of_thumb_flags(replace(offer(count=4), vcpus=None, memory_gb=None)) == []  # unknown: no flag
    assert rule_of_thumb_flags(offer(count=2, vcpus=8, mem=32)) == []              # edges are inside
    rows = quote([offer(count=4, vcpus=4, mem=16)], GpuRequest(count=4), SortKey.PRICE, None, TODAY)
    assert rows[0].to_json()["flags"] == ["low-vcpu-per-gpu", "low-ram-per-gpu"]


def test_json_has_stable_fields() -> None:
    rows = quote(PLANTED, GpuRequest(gpus=("A100-80G",), count=4), SortKey.PRICE, None, TODAY)
    doc = rows[0].to_json()
    assert list(doc) == [
        "provider", "instance_type", "region", "zone", "gpu", "gpu_count", "nodes", "total_gpus", "vram_gb",
        "vcpus", "memory_gb", "vcpus_per_gpu", "memory_gb_per_gpu", "interconnect", "market", "price_hr",
        "total_price_hr", "price_per_gpu_hr", "price_as_of", "price_as_of_approximate", "price_age_days",
        "source", "availability", "flags", "price_captured_at", "price_age_s", "price_source",
    ]
    assert doc["price_age_days"] == (TODAY - date(2025, 12, 1)).days
    assert doc["price_per_gpu_hr"] == pytest.approx(9.0 / 4)


def test_relaxations_name_the_nearest_changes() -> None:
    req = GpuRequest(gpus=("A100-80G",), count=3)
    hints = relaxations(PLANTED, req)
    assert any(h.startswith("--count 4") for h in hints)
    assert any(h.startswith("--count 8") for h in hints)
    req = GpuRequest(gpus=("L4-24G",), count=4, markets=frozenset({Market.SPOT}))
    hints = relaxations(PLANTED, req)
    assert any("both markets" in h for h in hints)
    hints = relaxations(PLANTED, GpuRequest(gpus=("A100-80G",), count=4, providers=("runpod",)))
    assert any(h.startswith("--gpu H100-80G") for h in hints)       # same or more VRAM
    assert any(h.startswith("without --provider") for h in hints)


def test_bad_input_names_the_value() -> None:
    with pytest.raises(QuoteInputError, match="did you mean A100-80G"):
        resolve_gpu_names(["A100-90G"])
    assert resolve_gpu_names(["a100-80gb,H100", "h100"]) == ("A100-80G", "H100-80G")
    for bad in ["us-[east", "us east", "", "us-]x["]:
        with pytest.raises(QuoteInputError, match="malformed region glob"):
            check_region_glob(bad)
    assert check_region_glob("us-[ew]*") == "us-[ew]*"


def test_shipped_catalog_a100_80g_x4_covers_every_provider_that_has_it() -> None:
    catalog = load_catalog()
    rows = quote(catalog.offers, GpuRequest(gpus=("A100-80G",), count=4), SortKey.PRICE, None, TODAY)
    assert {r.offer.provider for r in rows} == {"azure", "gcp", "runpod"}
    prices = [r.total_price_hr for r in rows]
    assert prices == sorted(prices)
    # The reference snapshot's rows: RunPod 4x_A100-80GB_SECURE 5.56 on-demand (GCP's cheaper us-central1/
    # us-east4/europe-west4 a2-ultragpu on-demand prices are the flagged discounted SKUs, left out), and
    # Azure Standard_NC96ads_A100_v4 westus3 spot 1.61612.
    on_demand = [r for r in rows if r.offer.market is Market.ON_DEMAND]
    spot = [r for r in rows if r.offer.market is Market.SPOT]
    assert on_demand[0].offer.price_hr == pytest.approx(5.56)
    assert spot[0].offer.price_hr == pytest.approx(1.61612)
    assert not any(r.offer.provider == "runpod" and r.offer.market is Market.SPOT for r in rows)


def test_a_gang_is_not_priced_on_one_of_your_machines() -> None:
    # One configured host cannot be two nodes: `orch quote --nodes 2` priced it x2, as the cheapest offer.
    from providers.base import Availability, OfferOrigin

    box1 = replace(offer("ssh", "box1", "onprem", price=0.5), source=OfferOrigin.OWN,
                   availability=Availability.AVAILABLE)
    req = GpuRequest(gpus=("A100-80G",), count=4, nodes=2)
    rows = quote([box1, *PLANTED], req, SortKey.PRICE, None, TODAY)
    assert [r.offer.instance_type for r in rows] == ["b", "c", "a"]
    rows = quote([box1, replace(box1, instance_type="box2"), *PLANTED], req, SortKey.PRICE, None, TODAY)
    assert [r.offer.instance_type for r in rows][:2] == ["box1", "box2"]
    assert rows[0].total_price_hr == pytest.approx(1.0)
