"""The shipped catalog: its content policy, its loader's sources, and that it rebuilds byte for byte."""

from __future__ import annotations

import csv
import importlib.util
import json
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from providers.base import Market
from providers.catalog.fileformat import render, write_atomic
from providers.catalog.layers import DirectoryCatalog, newest_per_key
from providers.catalog.loader import SHIPPED_DIR, CatalogError, load_catalog, user_catalog_file

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT.parent / "shared" / "reference" / "gpu_offers_snapshot.csv"


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    load_catalog.cache_clear()


def test_every_offer_is_complete_and_dated() -> None:
    snap = load_catalog()
    assert snap.origin == "shipped" and snap.approximate
    assert len(snap.offers) > 500
    assert {o.provider for o in snap.offers} == {"aws", "gcp", "azure", "runpod", "vastai", "lambda"}
    for o in snap.offers:
        assert o.price_hr > 0 and o.gpu_count >= 1 and o.vram_gb > 0
        assert (o.vcpus is None) == (o.provider == "vastai") and (o.vcpus is None or o.vcpus > 0)
        assert o.price_as_of_approximate and o.provider in snap.as_of


def test_policy_runpod_on_demand_only_and_no_fake_spot() -> None:
    snap = load_catalog()
    assert not [o for o in snap.offers if o.provider == "runpod" and o.market is Market.SPOT]
    od = {(o.provider, o.instance_type, o.region): o.price_hr for o in snap.offers if o.market is Market.ON_DEMAND}
    for o in snap.offers:
        if o.market is Market.SPOT and (o.provider, o.instance_type, o.region) in od:
            assert o.price_hr < od[(o.provider, o.instance_type, o.region)]


def test_policy_suspect_gcp_on_demand_rows_are_left_out_and_recorded() -> None:
    snap = load_catalog()
    keys = {(o.instance_type, o.region, o.market) for o in snap.offers if o.provider == "gcp"}
    assert ("a2-ultragpu-4g", "us-central1", Market.ON_DEMAND) not in keys
    assert ("a2-ultragpu-4g", "us-central1", Market.SPOT) in keys
    assert ("a3-highgpu-8g", "us-east4", Market.ON_DEMAND) in keys
    meta = json.loads((SHIPPED_DIR / "catalog.json").read_text())
    recorded = {(e["provider"], e["instance_type"], e["region"], e["market"]) for e in meta["excluded"]}
    assert ("gcp", "a3-highgpu-8g", "us-central1", "on-demand") in recorded
    assert ("runpod", "4x_A100-80GB_SECURE", "US", "spot") in recorded


def _user_file(provider: str, offers: list) -> Path:
    path = user_catalog_file(provider)
    write_atomic(path, render(offers))
    return path


def test_a_refreshed_provider_replaces_its_shipped_rows_and_a_broken_file_falls_back() -> None:
    shipped = load_catalog()
    vast = [o for o in shipped.offers if o.provider == "vastai"][:2]
    fresh = [replace(vast[0], price_hr=0.5, captured_at=datetime(2026, 12, 2, 9, 30, tzinfo=UTC),
                     price_as_of=date(2026, 12, 2), price_as_of_approximate=False, vcpus=16.0, memory_gb=64.0,
                     price_source="vast bundles")]
    path = _user_file("vastai", fresh)
    load_catalog.cache_clear()
    snap = load_catalog()
    assert snap.origin == "refreshed" and snap.refreshed == ("vastai",)
    assert [o for o in snap.offers if o.provider == "vastai"] == fresh         # the shipped vast rows are gone
    assert len([o for o in snap.offers if o.provider == "aws"]) == len([o for o in shipped.offers
                                                                         if o.provider == "aws"])
    assert snap.as_of["vastai"][0] == date(2026, 12, 2)
    path.write_text("#orch-catalog 2 {not json\n")
    load_catalog.cache_clear()
    broken = load_catalog()
    assert broken.refreshed == () and broken.offers == shipped.offers
    assert broken.problems and str(path) in broken.problems[0]
    with pytest.raises(CatalogError):
        DirectoryCatalog(path.parent, "broken").load()


def test_newest_row_per_key_wins() -> None:
    old = next(o for o in load_catalog().offers if o.provider == "aws")
    newer = replace(old, price_hr=old.price_hr / 2, captured_at=datetime(2026, 12, 2, tzinfo=UTC))
    assert newest_per_key([old, newer]) == [newer]
    assert newest_per_key([newer, old]) == [newer]


def test_a_gpu_filtered_load_reads_only_that_gpu() -> None:
    everything = load_catalog()
    a100 = load_catalog(("A100-80G",))
    assert a100.offers == tuple(o for o in everything.offers if o.gpu == "A100-80G")


@pytest.mark.skipif(not SNAPSHOT.exists(), reason="reference snapshot not beside this checkout (../shared)")
def test_committed_data_rebuilds_byte_for_byte(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("build_catalog", ROOT / "scripts" / "build_catalog.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows, meta = mod.build(SNAPSHOT)
    mod.write(tmp_path, rows, meta)
    for name in ("offers.csv", "catalog.json"):
        assert (tmp_path / name).read_bytes() == (SHIPPED_DIR / name).read_bytes(), name


@pytest.mark.skipif(not SNAPSHOT.exists(), reason="reference snapshot not beside this checkout (../shared)")
def test_cheapest_a100_80g_x4_equals_the_reference_csv() -> None:
    from orchestrator.offers.quote import SortKey, quote
    from providers.base import GpuRequest

    suspect = {("a2-ultragpu-4g", r) for r in ("us-central1", "europe-west4", "us-east4")}
    with SNAPSHOT.open() as f:
        ref = [r for r in csv.DictReader(f) if r["gpu"] == "A100-80GB" and r["gpu_count"] == "4"]
    od = min(float(r["price_ondemand_usd_hr"]) for r in ref if (r["instance_type"], r["region"]) not in suspect)
    spot = min(float(r["price_spot_usd_hr"]) for r in ref
               if r["price_spot_usd_hr"] and r["provider"] != "runpod")
    rows = quote(load_catalog().offers, GpuRequest(gpus=("A100-80G",), count=4), SortKey.PRICE, None,
                 __import__("datetime").date.today())
    assert min(r.offer.price_hr for r in rows if r.offer.market is Market.ON_DEMAND) == pytest.approx(od)
    assert min(r.offer.price_hr for r in rows if r.offer.market is Market.SPOT) == pytest.approx(spot)


def _builder():  # scripts/build_catalog.py, which is not a package module
    spec = importlib.util.spec_from_file_location("build_catalog", ROOT / "scripts" / "build_catalog.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_SNAPSHOT_HEADER = ("provider,instance_type,gpu,gpu_count,gpu_memory_gb,vcpus,memory_gb,region,zone,"
                    "price_ondemand_usd_hr,price_spot_usd_hr,source_file,catalog_date,source_commit\n")


def test_aws_on_demand_rows_are_not_pinned_to_the_cheapest_spot_zone(tmp_path: Path) -> None:
    # The snapshot's AWS zone is the AZ with the lowest spot price, here a Local Zone that needs opt-in. On-demand
    # is priced per region: pinning the on-demand row there sent an on-demand launch to that Local Zone.
    snapshot = tmp_path / "snap.csv"
    snapshot.write_text(_SNAPSHOT_HEADER + "aws,p5.48xlarge,H100,8,80,192,2048,us-east-1,use1-atl2-az1,55.04,10.24,"
                        "catalogs/v8/aws/vms.csv,,abc\n")
    rows, _ = _builder().build(snapshot)
    assert {(r[3], r[10]) for r in rows} == {("", "on-demand"), ("use1-atl2-az1", "spot")}
    shipped = [o for o in load_catalog().offers if o.provider == "aws"]
    assert not [o for o in shipped if o.market is Market.ON_DEMAND and o.zone is not None]
    assert all(o.zone for o in shipped if o.market is Market.SPOT)


def test_the_builder_keeps_the_source_price_to_the_micro_dollar(tmp_path: Path) -> None:
    # Written with ':g' the prices kept 6 significant digits: p4d.24xlarge 21.957642 became 21.9576, p6-b200
    # 113.9328 became 113.933, a2-ultragpu-8g 44.19056 became 44.1906 (not the source's list price).
    snapshot = tmp_path / "snap.csv"
    snapshot.write_text(_SNAPSHOT_HEADER
                        + "aws,p4d.24xlarge,A100,8,40,96,1152,us-east-1,use1-az6,21.957642,,x,,abc\n"
                        + "aws,p6-b200.48xlarge,B200,8,180,192,2048,us-east-2,use2-az1,113.9328,12.5,x,,abc\n")
    rows, _ = _builder().build(snapshot)
    assert sorted((r[1], r[10], r[11]) for r in rows) == [
        ("p4d.24xlarge", "on-demand", "21.957642"),
        ("p6-b200.48xlarge", "on-demand", "113.9328"), ("p6-b200.48xlarge", "spot", "12.5")]
    shipped = {(o.instance_type, o.region, o.market): o.price_hr for o in load_catalog().offers}
    assert shipped[("p4d.24xlarge", "us-east-1", Market.ON_DEMAND)] == 21.957642
