"""The shipped catalog: its content policy, its loader's sources, and that it rebuilds byte for byte."""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from providers.base import Market
from providers.catalog.loader import SHIPPED_DIR, CatalogError, DirectoryCatalog, default_sources, load_catalog

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
        assert o.price_hr > 0 and o.gpu_count >= 1 and o.vram_gb > 0 and o.vcpus > 0
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


def test_a_refreshed_cache_overrides_and_a_broken_one_falls_back(tmp_path: Path, monkeypatch) -> None:
    cache = tmp_path / "xdg-cache" / "orch" / "catalog"
    cache.mkdir(parents=True)
    shutil.copy(SHIPPED_DIR / "catalog.json", cache / "catalog.json")
    with (SHIPPED_DIR / "offers.csv").open() as src, (cache / "offers.csv").open("w") as dst:
        lines = src.readlines()
        dst.writelines(lines[:2])
    assert [type(s).__name__ for s in default_sources()] == ["DirectoryCatalog", "DirectoryCatalog"]
    snap = load_catalog()
    assert snap.origin == str(cache) and len(snap.offers) == 1
    load_catalog.cache_clear()
    (cache / "catalog.json").write_text("{not json")
    assert load_catalog().origin == "shipped"
    with pytest.raises(CatalogError):
        DirectoryCatalog(cache, "broken").load()


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
    from orchestrator.quote import SortKey, quote
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
