"""What a running machine costs, as each cloud reports it: ``Instance.price_hr`` from the real adapters against
the fakes (AWS spot: the zone's spot price at launch; Azure/GCP: the refreshed catalog's price at launch;
Vast/RunPod/Lambda: the API's own figure), and the parsers on the providers' published examples."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from providers.base import Market
from providers.catalog import load_catalog
from providers.catalog.fileformat import read_offers, render, write_atomic
from providers.catalog.loader import SHIPPED_DIR, current_price_hr, user_catalog_file
from tests.contract.harness import ProviderHarness

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT.parent / "shared" / "reference" / "specs"
LAMBDA_SPEC = ROOT / "tests" / "fakes" / "schemas" / "lambda-cloud-openapi-1.8.3.json"


@pytest.fixture(autouse=True)
def _fresh_catalog() -> Iterator[None]:
    load_catalog.cache_clear()
    yield
    load_catalog.cache_clear()


def _harness(name: str) -> ProviderHarness:
    module = importlib.import_module(f"tests.contract.harness_{name}")
    try:
        return module.make_harness()  # type: ignore[no-any-return]
    except ImportError as exc:
        pytest.skip(f"{name}: {exc}")


def test_aws_spot_instance_carries_its_zones_spot_price() -> None:
    from tests.fakes.aws import SpotPrice

    h = _harness("aws")
    try:
        spec = h.launch_spec("l0000000spot1", "pricetest", Market.SPOT)
        zones = {"us-east-1a": "use1-az6", "us-east-1b": "use1-az1", "us-east-1c": "use1-az2",
                 "us-east-1d": "use1-az4", "us-east-1e": "use1-az3", "us-east-1f": "use1-az5"}
        when = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
        h.fake.plant_spot_prices(  # type: ignore[attr-defined]
            [SpotPrice(spec.offer.instance_type, name, zid, 3.1 + i / 100, when) for i, (name, zid)
             in enumerate(sorted(zones.items()))])
        inst = h.provider().launch(spec)
        assert inst.market is Market.SPOT and inst.zone in zones
        assert inst.price_hr == pytest.approx(3.1 + sorted(zones).index(inst.zone) / 100)
        on_demand = h.provider().launch(h.launch_spec("l00000000ond1", "pricetest", Market.ON_DEMAND))
        assert on_demand.price_hr is None                  # AWS reports no price: the offer's is charged
    finally:
        h.close()


@pytest.mark.parametrize("name", ["azure", "gcp"])
def test_azure_and_gcp_instances_carry_the_refreshed_catalog_price_at_launch(name: str) -> None:
    h = _harness(name)
    try:
        first = h.provider().launch(h.launch_spec("l000000price1", "pricetest"))
        spec = h.launch_spec("l000000price2", "pricetest")
        assert first.price_hr == spec.offer.price_hr == current_price_hr(spec.offer)   # the shipped price
        # A refresh moves this machine's price: a launch after it is charged the new one.
        shipped = [o for o in read_offers(SHIPPED_DIR / "offers.csv") if o.provider == name]
        moved = [replace(o, price_hr=round(o.price_hr * 1.07, 6), captured_at=datetime.now(UTC),
                         price_as_of=datetime.now(UTC).date(), price_as_of_approximate=False)
                 if o.key == spec.offer.key else o for o in shipped]
        write_atomic(user_catalog_file(name), render(moved))
        load_catalog.cache_clear()
        second = h.provider().launch(spec)
        assert second.price_hr == pytest.approx(round(spec.offer.price_hr * 1.07, 6))
    finally:
        h.close()


@pytest.mark.parametrize("name", ["vastai", "runpod", "lambda"])
def test_marketplaces_report_the_instances_price(name: str) -> None:
    h = _harness(name)
    try:
        market = Market.SPOT if name == "vastai" else Market.ON_DEMAND
        inst = h.provider().launch(h.launch_spec("l00000market1", "pricetest", market))
        got = h.provider().get(inst.instance_id) or inst
        assert got.price_hr is not None and got.price_hr > 0
    finally:
        h.close()


@pytest.mark.skipif(not (SPECS / "vastai-openapi.yaml").exists(), reason="specs not beside this checkout")
def test_vast_instance_example_dph_total() -> None:
    """vast-ai/docs @ e758d3501e4308439edcf55424a4360b8c039d1b, api-reference/openapi.yaml, components.schemas.
    Instance: the property examples (dph_total 1.0020740740740741 "Total dollars per hour")."""
    import yaml

    from providers.vastai.instances import parse_instance

    props = yaml.safe_load((SPECS / "vastai-openapi.yaml").read_text())["components"]["schemas"]["Instance"][
        "properties"]
    raw = {k: v["example"] for k, v in props.items() if "example" in v}
    assert parse_instance(raw).price_hr == pytest.approx(1.0020740740740741)


@pytest.mark.skipif(not (SPECS / "runpod-rest-v1-openapi.json").exists(), reason="specs not beside this checkout")
def test_runpod_pod_example_cost_per_hr() -> None:
    """runpod/docs @ 01242f8510a3aba07200e152c2e33e07bd0a8e3f, api-reference/openapi.json, Pod.costPerHr: the
    example is the string "0.74" (the GraphQL API answers a number): both read as $0.74/h."""
    from providers.runpod.instances import to_instance

    pod = json.loads((SPECS / "runpod-rest-v1-openapi.json").read_text())["components"]["schemas"]["Pod"]
    example = pod["properties"]["costPerHr"]["example"]
    assert to_instance({"id": "p1", "costPerHr": example}).price_hr == pytest.approx(0.74)
    assert to_instance({"id": "p1", "costPerHr": 0.74}).price_hr == pytest.approx(0.74)
    for nonsense in (None, "", "free", -1, float("nan")):
        assert to_instance({"id": "p1", "costPerHr": nonsense}).price_hr is None


def test_lambda_instance_example_price_cents_per_hour() -> None:
    """Lambda Cloud API 1.8.3 (tests/fakes/schemas/PROVENANCE.md): an Instance whose instance_type is the
    InstanceType example (gpu_8x_h100_sxm5gdr, 3592 cents per hour)."""
    from providers.lambdalabs.instances import to_instance

    schemas = json.loads(LAMBDA_SPEC.read_text())["components"]["schemas"]
    raw = {k: v["examples"][0] for k, v in schemas["Instance"]["properties"].items() if v.get("examples")}
    raw["instance_type"] = {k: v["examples"][0] for k, v in schemas["InstanceType"]["properties"].items()
                            if v.get("examples")}
    raw["region"] = {k: v["examples"][0] for k, v in schemas["Region"]["properties"].items() if v.get("examples")}
    raw["status"] = "active"
    assert to_instance(raw).price_hr == pytest.approx(35.92)
