"""Planner: eligibility, ranking by expected cost, flags, live offers merged onto the catalog."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest

from orchestrator.offers.planner import Constraint, DataSource, PlanRequest, plan, without_zone
from orchestrator.offers.sources import gather_offers
from providers.base import Availability, GpuRequest, Market, Offer, OfferOrigin
from providers.errors import ProviderUnavailableError
from providers.fabric import FabricWant
from providers.gpus import Interconnect


def offer(provider: str, itype: str, price: float, region: str = "us-east-1", zone: str | None = None,
          market: Market = Market.ON_DEMAND, gpu: str = "A100-80G", vram: float = 80, count: int = 4,
          vcpus: float = 12, mem: float = 48, source: OfferOrigin = OfferOrigin.CATALOG) -> Offer:
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
    # runpod, the cheapest, launches single machines only: not for 2 nodes.
    assert [x.offer.provider for x in p.eligible] == ["gcp", "azure", "aws"]
    assert p.chosen is not None and p.chosen.expected_cost_usd == pytest.approx(15.0 * 2 * 10)
    assert p.chosen.total_price_hr == pytest.approx(30.0)


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
    live = replace(offer("aws", "p", 12.0, zone="use1-az1", source=OfferOrigin.LIVE),
                   availability=Availability.AVAILABLE)
    merged = gather_offers(GpuRequest(gpus=("A100-80G",), count=4), OFFERS, [Live([live]), Live(fail=True)])
    aws = [o for o in merged if o.provider == "aws"]
    assert len(aws) == 1 and aws[0].price_hr == 12.0 and aws[0].source is OfferOrigin.LIVE
    assert len(merged) == len(OFFERS)


def test_every_resource_constraint_excludes_with_its_reason_in_words() -> None:
    offers = [
        offer("aws", "ok", 9.0, vcpus=48, mem=800),
        offer("runpod", "few-cpus", 4.0, vcpus=12, mem=800),              # 3 vCPU/GPU
        offer("gcp", "little-ram", 5.0, region="us-central1", vcpus=48, mem=64),   # 16 GB/GPU
        replace(offer("vastai", "small-disk", 3.0, vcpus=48, mem=800, source=OfferOrigin.LIVE), max_disk_gb=80),
        replace(offer("azure", "pcie", 6.0, region="us-east", vcpus=48, mem=800), interconnect=Interconnect.PCIE),
        offer("lambda", "dear", 50.0, vcpus=48, mem=800),
        offer("aws", "far", 2.0, region="eu-west-1", vcpus=48, mem=800),
        replace(offer("ssh", "box", 0.0, region="onprem", vcpus=48, mem=800), availability=Availability.NOT_AVAILABLE),
    ]
    req = PlanRequest(gpus=("A100-80G",), count=4, vcpus_per_gpu=8, ram_gb_per_gpu=64, disk_gb=500,
                      interconnect=Interconnect.NVLINK, max_price_hr=20, regions_allow=("us-*", "onprem"))
    p = plan(req, gather_offers(req.gpu_request(), offers))
    assert [x.offer.instance_type for x in p.eligible] == ["ok"]
    why = {x.offer.instance_type: [(e.constraint, e.detail) for e in x.excluded] for x in p.rejected}
    assert why == {
        "few-cpus": [(Constraint.VCPUS, "3 vCPU/GPU < 8 asked")],
        "little-ram": [(Constraint.RAM, "16 GB RAM/GPU < 64 asked")],
        "small-disk": [(Constraint.DISK, "disk 80 GB < 500 asked")],
        "pcie": [(Constraint.INTERCONNECT, "pcie, nvlink asked")],
        "dear": [(Constraint.MAX_PRICE, "$50.00/h > max_price_hr $20.00")],
        "far": [(Constraint.REGION_NOT_ALLOWED, "eu-west-1 is not in regions.allow (us-*, onprem)")],
        "box": [(Constraint.NOT_AVAILABLE, "not available now (no capacity, or your machine is reserved)")],
    }
    # the first flags of a rejected offer are its constraints, as before
    assert all(x.flags[: len(x.excluded)] == tuple(e.constraint.value for e in x.excluded) for x in p.rejected)


def test_vcpus_per_gpu_100_leaves_no_offer_with_fewer() -> None:
    req = PlanRequest(gpus=("A100-80G",), count=4, vcpus_per_gpu=100)
    p = plan(req, gather_offers(req.gpu_request(), OFFERS))
    assert p.chosen is None and len(p.rejected) == len(OFFERS)
    assert {x.excluded[0].detail for x in p.rejected} == {"3 vCPU/GPU < 100 asked", "1 vCPU/GPU < 100 asked"}


def test_unknown_facts_are_notes_not_exclusions() -> None:
    """A machine of yours without vcpus/memory_gb/disk_gb in the config, a Vast catalog row: not checkable."""
    mine = offer("ssh", "box", 0.0, region="onprem", vcpus=0, mem=0, source=OfferOrigin.OWN)
    vast = offer("vastai", "cat", 3.0, vcpus=48, mem=800)
    aws = offer("aws", "p", 9.0, vcpus=48, mem=800)
    req = PlanRequest(gpus=("A100-80G",), count=4, vcpus_per_gpu=8, ram_gb_per_gpu=64, disk_gb=500)
    p = plan(req, gather_offers(req.gpu_request(), [mine, vast, aws]))
    notes = {x.offer.provider: x.notes for x in p.eligible}
    assert [x.offer.provider for x in p.eligible] == ["ssh", "vastai", "aws"]
    assert any("vCPU count unknown" in n for n in notes["ssh"]) and any("RAM unknown" in n for n in notes["ssh"])
    assert any("500 GB asked is not checked" in n for n in notes["ssh"] + notes["vastai"])
    assert not any("not checked" in n for n in notes["aws"])   # AWS creates the disk at the asked size
    assert "low-vcpu-per-gpu" not in p.eligible[0].flags        # 0 is unknown, not few


def test_near_misses_break_fewest_constraints_cheapest_first() -> None:
    offers = [
        offer("aws", "two", 1.0, region="eu-west-1", vcpus=4),       # region and vCPUs
        offer("gcp", "one-dear", 9.0, region="eu-west4", vcpus=48),  # region only
        offer("azure", "one-cheap", 3.0, region="westeurope", vcpus=48),
    ]
    req = PlanRequest(gpus=("A100-80G",), count=4, regions_allow=("us-*",), vcpus_per_gpu=8)
    p = plan(req, gather_offers(req.gpu_request(), offers))
    assert [x.offer.instance_type for x in p.near_misses()] == ["one-cheap", "one-dear", "two"]
    assert [x.offer.instance_type for x in p.near_misses(1)] == ["one-cheap"]
    assert p.exclusion_counts() == {Constraint.REGION_NOT_ALLOWED: 3, Constraint.VCPUS: 1}


@pytest.mark.parametrize(("checkpointed", "says"), [
    (True, "orch resumes from the last committed checkpoint"),
    (False, "restarts the job from scratch"),
])
def test_the_spot_note_is_true_for_the_job(checkpointed: bool, says: str) -> None:
    req = PlanRequest(gpus=("A100-80G",), count=4, checkpointed=checkpointed)
    [spot] = [x for x in plan(req, gather_offers(req.gpu_request(), OFFERS)).eligible if x.offer.market is Market.SPOT]
    [note] = [n for n in spot.notes if n.startswith("spot")]
    assert says in note
    if not checkpointed:
        assert "resumes" not in note and "add checkpoint:" in note


def test_the_fabric_between_the_nodes_is_a_note_for_multi_node_jobs() -> None:
    """AWS EFA, Azure InfiniBand and GCP TCPX orch attaches; GCP's RoCE (A3 Ultra) it does not (TCP, warned);
    a type without one: plain TCP."""
    cases = [(offer("aws", "p4d.24xlarge", 30.0, gpu="A100-40G", vram=40, count=8, vcpus=96, mem=1152),
              ("talk over efa", "EFA network interface", "points NCCL at it")),
             (offer("azure", "Standard_ND96asr_v4", 28.0, gpu="A100-40G", vram=40, count=8, vcpus=96, mem=900),
              ("talk over infiniband", "availability set", "points NCCL at it")),
             (offer("gcp", "a3-highgpu-8g", 88.0, gpu="A100-40G", vram=40, count=8, vcpus=208, mem=1872),
              ("talk over gpudirect-tcpx", "needs providers.gcp.gpu_networks")),
             (offer("gcp", "a3-ultragpu-8g", 88.0, gpu="A100-40G", vram=40, count=8, vcpus=224, mem=2952),
              ("roce", "does not set up", "NCCL runs over TCP", "plain TCP")),
             (offer("aws", "g5.48xlarge", 16.0, gpu="A100-40G", vram=40, count=8, vcpus=192, mem=768),
              ("no RDMA fabric", "NCCL runs over TCP", "plain TCP"))]
    for o, says in cases:
        for nodes, noted in ((2, True), (1, False)):
            req = PlanRequest(gpus=("A100-40G",), count=8, nodes=nodes)
            [chosen] = plan(req, gather_offers(req.gpu_request(), [o])).eligible
            notes = [n for n in chosen.notes if "NCCL" in n]
            assert bool(notes) is noted, (o.instance_type, nodes, chosen.notes)
            if noted:
                assert all(s in notes[0] for s in says), notes[0]


def test_a_multi_node_job_is_planned_only_where_orch_launches_several_machines() -> None:
    """The engine launches a multi-node job only on a MULTI_NODE provider: the plan (and apply's preview) must
    not choose a Lambda, RunPod or Vast.ai offer the engine then passes over ("no eligible offer")."""
    offers = [offer("lambda", "gpu_8x_a100", 14.0, count=8), offer("aws", "p4de", 40.0, count=8, vcpus=96, mem=1152)]
    two = PlanRequest(gpus=("A100-80G",), count=8, nodes=2)
    result = plan(two, gather_offers(two.gpu_request(), offers))
    assert [p.offer.provider for p in result.eligible] == ["aws"]
    [out] = result.rejected
    assert out.excluded[0].constraint is Constraint.SINGLE_NODE
    assert out.excluded[0].detail == "orch launches single machines on lambda, not 2 nodes"
    one = PlanRequest(gpus=("A100-80G",), count=8)
    assert [p.offer.provider for p in plan(one, gather_offers(one.gpu_request(), offers)).eligible] == ["lambda", "aws"]


def test_the_registry_says_multi_node_exactly_where_the_adapter_has_the_capability() -> None:
    import importlib

    from providers.base import Capability
    from providers.registry import PROVIDERS, launches_multi_node

    for e in PROVIDERS:
        adapter = getattr(importlib.import_module(f"{e.package}.adapter"), e.adapter_class)
        assert launches_multi_node(e.name) is (Capability.MULTI_NODE in adapter.capabilities), e.name


def test_the_registry_says_live_offers_exactly_where_the_adapter_has_the_capability() -> None:
    import importlib

    from providers.base import Capability
    from providers.registry import PROVIDERS, prices_live

    for e in PROVIDERS:
        adapter = getattr(importlib.import_module(f"{e.package}.adapter"), e.adapter_class)
        assert prices_live(e.name) is (Capability.LIVE_OFFERS in adapter.capabilities), e.name


def test_every_fabric_fact_names_a_catalog_instance_type() -> None:
    from providers.catalog import load_catalog
    from providers.fabric import FABRICS

    known = {(o.provider, o.instance_type) for o in load_catalog().offers}
    assert set(FABRICS) <= known


def test_resources_fabric_rejects_offers_without_the_asked_link_between_nodes() -> None:
    p4d = offer("aws", "p4d.24xlarge", 30.0, gpu="A100-40G", vram=40, count=8, vcpus=96, mem=1152)
    nd = offer("azure", "Standard_ND96asr_v4", 28.0, gpu="A100-40G", vram=40, count=8, vcpus=96, mem=900)
    g5 = offer("aws", "g5.48xlarge", 16.0, gpu="A100-40G", vram=40, count=8, vcpus=192, mem=768)

    def eligible(fabric: str, nodes: int = 2) -> set[str]:
        req = PlanRequest(gpus=("A100-40G",), count=8, nodes=nodes, fabric=FabricWant(fabric))
        return {x.offer.instance_type for x in plan(req, gather_offers(req.gpu_request(), [p4d, nd, g5])).eligible}

    assert eligible("any") == {"p4d.24xlarge", "Standard_ND96asr_v4", "g5.48xlarge"}
    assert eligible("fast") == {"p4d.24xlarge", "Standard_ND96asr_v4"}
    assert eligible("infiniband") == {"Standard_ND96asr_v4"}, "EFA is not IB verbs; ND's InfiniBand is"
    assert eligible("infiniband", nodes=1) == {"p4d.24xlarge", "Standard_ND96asr_v4", "g5.48xlarge"}
    req = PlanRequest(gpus=("A100-40G",), count=8, nodes=2, fabric=FabricWant.FAST)
    [g5_out] = [x for x in plan(req, gather_offers(req.gpu_request(), [g5])).rejected]
    assert g5_out.excluded[0].constraint is Constraint.FABRIC and "plain TCP" in g5_out.excluded[0].detail
    assert g5_out.excluded[0].detail.endswith("resources.fabric asks fast")


def test_a_fabric_asked_is_a_member_never_its_text() -> None:
    from providers.fabric import fabric_shortfall

    with pytest.raises(ValueError, match="'quick' is not a valid FabricWant"):
        FabricWant("quick")
    with pytest.raises(TypeError, match="must be a FabricWant"):
        fabric_shortfall("aws", "g5.48xlarge", 2, "infiniband")  # type: ignore[arg-type]


def test_fabric_labels_for_quote_wide() -> None:
    from providers.fabric import fabric_label

    assert fabric_label("aws", "p5.48xlarge", 2) == "efa 3200G"
    assert fabric_label("azure", "Standard_ND96isr_H100_v5", 2) == "infiniband 3200G"
    assert fabric_label("gcp", "a3-ultragpu-8g", 2) == "roce 3200G, tcp"
    assert fabric_label("gcp", "a3-highgpu-8g", 1) == "gpudirect-tcpx 800G"
    assert fabric_label("aws", "g5.48xlarge", 2) == "ethernet"


def test_the_offer_query_carries_the_jobs_disk() -> None:
    """A cloud that bills disk by the hour (Vast) prices its offers with the job's disk: the query says it."""
    assert PlanRequest(gpus=("A100-80G",), disk_gb=500).gpu_request().disk_gb == 500
    assert PlanRequest(gpus=("A100-80G",)).gpu_request().disk_gb is None


def test_one_of_your_machines_is_one_node_not_a_gang() -> None:
    # A configured host is one machine: a 2-node job on it ranked it first (free), and the gang's second node then
    # found no machine beside node 0. It is eligible only where as many hosts of its kind are free in one place.
    box1 = replace(offer("ssh", "box1", 0.0, region="onprem", source=OfferOrigin.OWN),
                   availability=Availability.AVAILABLE)
    box2 = replace(box1, instance_type="box2")
    req = PlanRequest(gpus=("A100-80G",), count=4, nodes=2)
    alone = plan(req, [box1, *OFFERS])
    assert alone.chosen is not None and alone.chosen.offer.provider == "gcp"
    [mine] = [p for p in alone.rejected if p.offer.provider == "ssh"]
    assert [e.constraint for e in mine.excluded] == [Constraint.OWN_MACHINES]
    assert mine.excluded[0].detail == "1 of your 4xA100-80G machines free in onprem, 2 nodes asked"
    taken = replace(box2, availability=Availability.NOT_AVAILABLE)       # a reserved host is not free
    assert plan(req, [box1, taken, *OFFERS]).chosen.offer.provider == "gcp"  # type: ignore[union-attr]
    both = plan(req, [box1, box2, *OFFERS])
    assert both.chosen is not None and both.chosen.offer.instance_type == "box1"
    assert plan(replace(req, nodes=1), [box1, *OFFERS]).chosen.offer.instance_type == "box1"  # type: ignore[union-attr]
