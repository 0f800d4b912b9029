"""The refresh's parsers, on the providers' published example payloads and on gpuhunt's row format."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from providers.base import Market
from providers.catalog.refresh.azure_source import item_to_offer
from providers.catalog.refresh.gpuhunt_source import to_offer
from providers.catalog.refresh.live_sources import lambda_offer, lambda_types, runpod_prices
from providers.catalog.refresh.model import RefreshContext, RefreshSettings, SourceError
from providers.catalog.refresh.vast_source import ask_to_offer, machine_share

ROOT = Path(__file__).resolve().parents[1]
VAST_SPEC = ROOT.parent / "shared" / "reference" / "specs" / "vastai-openapi.yaml"
LAMBDA_SPEC = ROOT / "tests" / "fakes" / "schemas" / "lambda-cloud-openapi-1.8.3.json"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
CTX = RefreshContext(RefreshSettings(), None, NOW)  # type: ignore[arg-type]  # parsers make no call


@pytest.mark.skipif(not VAST_SPEC.exists(), reason="Vast's OpenAPI spec not beside this checkout (../shared)")
def test_vast_search_example_from_the_published_spec() -> None:
    """vast-ai/docs @ e758d3501e4308439edcf55424a4360b8c039d1b, api-reference/openapi.yaml, POST /api/v0/bundles,
    200 example: 4 GPUs, cpu_cores 64 of which 32 effective, cpu_ram 65536 MB, dph_base 0.123456."""
    import yaml

    spec = yaml.safe_load(VAST_SPEC.read_text())
    example = spec["paths"]["/api/v0/bundles"]["post"]["responses"]["200"]["content"]["application/json"][
        "example"]["offers"]
    assert machine_share(example) == (32.0, 32.0)                # half the cores, so half the host's 64 GB
    assert ask_to_offer(example, Market.ON_DEMAND, CTX) is None  # "Imaginary RTX 9999" is no GPU orch sells
    offer = ask_to_offer({**example, "gpu_name": "RTX 4090"}, Market.ON_DEMAND, CTX)
    assert offer is not None
    assert (offer.gpu, offer.gpu_count, offer.vcpus, offer.memory_gb) == ("RTX4090-24G", 4, 32.0, 32.0)
    assert offer.price_hr == pytest.approx(0.123456 + 100 * 0.987654 / 720)   # dph_base + the disk's $/h
    spot = ask_to_offer({**example, "gpu_name": "RTX 4090"}, Market.SPOT, CTX)
    # spot: the bid a launch places (min_bid 0.111111 x the adapter's default markup), which Vast bills
    assert spot is not None and spot.price_hr == pytest.approx(0.1222 + 100 * 0.987654 / 720)


def test_vast_catalog_spot_rows_quote_the_adapters_bid() -> None:
    """The refreshed catalog and the live adapter price an interruptible alike: at the bid a launch places."""
    from providers.catalog.refresh.vast_source import BID_MARKUP, DISK_GB
    from providers.vastai.offers import offer_price_hr
    from providers.vastai.settings import Settings

    defaults = Settings(api_key=None)
    assert (defaults.bid_markup, defaults.disk_gb) == (BID_MARKUP, DISK_GB)
    ask = {"id": 1, "gpu_name": "RTX 4090", "num_gpus": 1, "gpu_ram": 24564, "dph_base": 0.4, "min_bid": 0.1537,
           "storage_cost": 0.15, "cpu_cores": 16, "cpu_cores_effective": 8.0, "cpu_ram": 64000}
    row = ask_to_offer(ask, Market.SPOT, CTX)
    assert row is not None
    assert row.price_hr == pytest.approx(offer_price_hr(ask, Market.SPOT, DISK_GB, bid_markup=BID_MARKUP))


def test_lambda_instance_types_from_the_published_spec() -> None:
    """Lambda Cloud API 1.8.3 (tests/fakes/schemas/PROVENANCE.md): the InstanceType field examples and the
    InstanceTypes example (a GH200: orch's registry knows it, so its offer is kept)."""
    schemas = json.loads(LAMBDA_SPEC.read_text())["components"]["schemas"]
    fields = schemas["InstanceType"]["properties"]
    itype = {k: v["examples"][0] for k, v in fields.items() if "examples" in v}
    itype["specs"] = {k: v["examples"][0] for k, v in schemas["InstanceTypeSpecs"]["properties"].items()}
    offer = lambda_offer(itype, "us-west-1", CTX)
    assert offer is not None
    assert (offer.instance_type, offer.gpu, offer.gpu_count, offer.vcpus, offer.memory_gb) == (
        "gpu_8x_h100_sxm5gdr", "H100-80G", 8, 208.0, 1800.0)
    assert offer.price_hr == pytest.approx(35.92) and offer.interconnect.value == "nvlink"
    example = lambda_types({"data": schemas["InstanceTypes"]["example"]})
    assert [e["instance_type"]["name"] for e in example] == ["gpu_1x_gh200"]
    gh200 = lambda_offer(example[0]["instance_type"], "us-west-1", CTX)
    assert gh200 is not None and (gh200.gpu, gh200.gpu_count) == ("GH200-96G", 1)
    with pytest.raises(SourceError):
        lambda_types({"error": {"code": "global/invalid-api-key"}})


def test_the_lambda_fixture_validates_against_the_spec() -> None:
    import jsonschema

    spec = json.loads(LAMBDA_SPEC.read_text())
    schema = spec["paths"]["/api/v1/instance-types"]["get"]["responses"]["200"]["content"]["application/json"][
        "schema"]
    answer = json.loads((ROOT / "tests" / "fixtures" / "lambda-instance-types" / "instance-types.json").read_text())
    jsonschema.validate(answer, {**schema, "components": spec["components"]})


def _azure_item(**changes: Any) -> dict[str, Any]:
    """An item in the shape the Retail Prices docs show (learn.microsoft.com/rest/api/cost-management/
    retail-prices/azure-retail-prices, "API response": currencyCode, retailPrice, armRegionName, meterName,
    productName, armSkuName, unitOfMeasure, type ...)."""
    item = {"currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": 98.32, "unitPrice": 98.32,
            "armRegionName": "eastus", "location": "US East", "effectiveStartDate": "2026-10-01T00:00:00Z",
            "meterName": "ND96isr H100 v5", "productName": "Virtual Machines NDisr H100 v5 Series",
            "skuName": "ND96isr H100 v5", "serviceName": "Virtual Machines", "serviceFamily": "Compute",
            "unitOfMeasure": "1 Hour", "type": "Consumption", "isPrimaryMeterRegion": True,
            "armSkuName": "Standard_ND96isr_H100_v5"}
    return {**item, **changes}


def test_azure_retail_items() -> None:
    od = item_to_offer(_azure_item(), CTX)
    assert od is not None and (od.market, od.gpu, od.gpu_count, od.price_hr) == (Market.ON_DEMAND, "H100-80G", 8,
                                                                                  98.32)
    spot = item_to_offer(_azure_item(meterName="ND96isr H100 v5 Spot", retailPrice=39.33), CTX)
    assert spot is not None and spot.market is Market.SPOT and spot.captured_at == NOW
    for skipped in (_azure_item(productName="Virtual Machines NDisr H100 v5 Series Windows"),
                    _azure_item(meterName="ND96isr H100 v5 Low Priority"),
                    _azure_item(currencyCode="EUR"), _azure_item(armSkuName="Standard_F16s"),
                    _azure_item(retailPrice=0)):
        assert item_to_offer(skipped, CTX) is None


def test_runpod_gpu_types_answer() -> None:
    answer = json.loads((ROOT / "tests" / "fixtures" / "runpod-gputypes" / "gpu-types.json").read_text())
    prices = runpod_prices(answer)
    assert prices[("NVIDIA A100 80GB PCIe", "SECURE")] == 1.39
    assert ("NVIDIA H100 80GB HBM3", "COMMUNITY") not in prices          # null: no community price
    with pytest.raises(SourceError):
        runpod_prices({"errors": [{"message": "rate limited"}]})
    with pytest.raises(SourceError):
        runpod_prices({"data": {}})


def _item(**changes: Any) -> SimpleNamespace:
    """A gpuhunt CatalogItem's fields (gpuhunt 0.1.34 _internal/models.py)."""
    base = dict(instance_name="a2-ultragpu-4g", location="us-central1-a", price=20.06, cpu=48, memory=680.0,
                gpu_count=4, gpu_name="A100", gpu_memory=80.0, spot=False, disk_size=None,
                gpu_vendor=SimpleNamespace(value="nvidia"), flags=[], provider_data={})
    return SimpleNamespace(**{**base, **changes})


def test_gpuhunt_rows_to_offers() -> None:
    day = date(2026, 12, 2)
    a2 = to_offer("gcp", _item(), day, NOW, "gpuhunt gcp v")
    assert a2 is not None
    assert (a2.region, a2.zone, a2.gpu, a2.interconnect.value, a2.price_source) == (
        "us-central1", "us-central1-a", "A100-80G", "nvlink", "gpuhunt gcp v")
    n1 = to_offer("gcp", _item(instance_name="n1-standard-8", gpu_name="T4", gpu_count=2, gpu_memory=16.0), day,
                  NOW, "s")
    assert n1 is not None and n1.instance_type == "n1-standard-8+2xT4"            # providers.gcp.machines.machine_shape
    rp = to_offer("runpod", _item(instance_name="NVIDIA H100 80GB HBM3", location="EU-RO-1", gpu_name="H100",
                                  gpu_count=8), day, None, "s")
    assert rp is not None and (rp.instance_type, rp.region, rp.zone) == ("8x_NVIDIA H100 80GB HBM3_SECURE",
                                                                         "EU-RO-1", "EU-RO-1")
    assert rp.price_as_of_approximate and rp.captured_at is None                 # no publication time known
    assert to_offer("gcp", _item(flags=["gcp-dws-calendar-mode"]), day, NOW, "s") is None
    assert to_offer("aws", _item(gpu_vendor=SimpleNamespace(value="amd"), gpu_name="MI300X"), day, NOW, "s") is None
    assert to_offer("aws", _item(gpu_count=0, gpu_name=None), day, NOW, "s") is None
    arm = to_offer("lambda", _item(gpu_name="GH200", flags=["lambda-arm"]), day, NOW, "s")   # Grace: arm64, kept
    assert arm is not None and arm.gpu == "GH200-96G"
